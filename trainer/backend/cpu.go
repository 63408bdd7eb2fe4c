package backend

import (
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// CPU is the pure-Go backend: buffers are Go slices, Gemm is gonum's blas32,
// the elementwise ops are plain loops (split over GOMAXPROCS goroutines when
// large). Every operation completes before it returns. It is the reference
// implementation of the interface's documented semantics: the CUDA backend is
// tested against it.
type CPU struct{}

// NewCPU returns the CPU backend.
func NewCPU() *CPU { return &CPU{} }

type cpuBuf struct{ d []float32 }

func (b *cpuBuf) Len() int { return len(b.d) }

type cpuIntBuf struct{ d []int32 }

func (b *cpuIntBuf) Len() int { return len(b.d) }

func f(b Buffer) []float32   { return b.(*cpuBuf).d }
func fi(b IntBuffer) []int32 { return b.(*cpuIntBuf).d }

// Name returns "cpu".
func (*CPU) Name() string { return "cpu" }

// Alloc returns a zeroed buffer of n float32s.
func (*CPU) Alloc(n int) Buffer { return &cpuBuf{d: make([]float32, n)} }

// AllocInt returns a zeroed buffer of n int32s.
func (*CPU) AllocInt(n int) IntBuffer { return &cpuIntBuf{d: make([]int32, n)} }

// Free releases b.
func (*CPU) Free(b Buffer) { b.(*cpuBuf).d = nil }

// FreeInt releases b.
func (*CPU) FreeInt(b IntBuffer) { b.(*cpuIntBuf).d = nil }

// Upload copies src into the start of dst.
func (*CPU) Upload(dst Buffer, src []float32) { copy(f(dst), src) }

// UploadInt copies src into the start of dst.
func (*CPU) UploadInt(dst IntBuffer, src []int32) { copy(fi(dst), src) }

// Download copies the first len(dst) elements of src into dst.
func (*CPU) Download(dst []float32, src Buffer) { copy(dst, f(src)[:len(dst)]) }

// View implements HostView: b's own elements.
func (*CPU) View(b Buffer) []float32 { return f(b) }

// parallelMin is the element count below which loops stay on one goroutine.
const parallelMin = 1 << 16

// parallel runs fn over [0,n) in contiguous chunks, concurrently when n is large.
func parallel(n int, fn func(lo, hi int)) {
	w := runtime.GOMAXPROCS(0)
	if n < parallelMin || w < 2 {
		fn(0, n)
		return
	}
	if w > 8 {
		w = 8
	}
	chunk := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() { defer wg.Done(); fn(lo, hi) }()
	}
	wg.Wait()
}

// Fill sets the first n elements of x to v.
func (*CPU) Fill(x Buffer, n int, v float32) {
	d := f(x)[:n]
	parallel(n, func(lo, hi int) {
		s := d[lo:hi]
		for i := range s {
			s[i] = v
		}
	})
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C (row-major).
func (*CPU) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Buffer, beta float32, c Buffer) {
	if m == 0 || n == 0 {
		return
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	ar, ac := m, k
	if transA {
		ta, ar, ac = blas.Trans, k, m
	}
	br, bc := k, n
	if transB {
		tb, br, bc = blas.Trans, n, k
	}
	if k == 0 {
		cd := f(c)[:m*n]
		for i := range cd {
			cd[i] *= beta
		}
		return
	}
	A := blas32.General{Rows: ar, Cols: ac, Stride: ac, Data: f(a)[:ar*ac]}
	B := blas32.General{Rows: br, Cols: bc, Stride: bc, Data: f(b)[:br*bc]}
	C := blas32.General{Rows: m, Cols: n, Stride: n, Data: f(c)[:m*n]}
	blas32.Gemm(ta, tb, alpha, A, B, beta, C)
}

// AddRowVector adds v to every row of x (rows×cols).
func (*CPU) AddRowVector(x, v Buffer, rows, cols int) {
	xd, vd := f(x), f(v)[:cols]
	for r := 0; r < rows; r++ {
		row := xd[r*cols : (r+1)*cols]
		for c, vv := range vd {
			row[c] += vv
		}
	}
}

// SumRows accumulates dst[c] += Σ_r x[r,c].
func (*CPU) SumRows(dst, x Buffer, rows, cols int) {
	dd, xd := f(dst)[:cols], f(x)
	for r := 0; r < rows; r++ {
		row := xd[r*cols : (r+1)*cols]
		for c, xv := range row {
			dd[c] += xv
		}
	}
}

// ReLU sets y = max(x, 0) over n elements.
func (*CPU) ReLU(y, x Buffer, n int) {
	yd, xd := f(y)[:n], f(x)[:n]
	for i, v := range xd {
		if v > 0 {
			yd[i] = v
		} else {
			yd[i] = 0
		}
	}
}

// ReLUBackward sets dx = dy where y > 0, else 0.
func (*CPU) ReLUBackward(dx, dy, y Buffer, n int) {
	dxd, dyd, yd := f(dx)[:n], f(dy)[:n], f(y)[:n]
	for i, v := range yd {
		if v > 0 {
			dxd[i] = dyd[i]
		} else {
			dxd[i] = 0
		}
	}
}

// EmbeddingBag computes out[b,:] = Σ_j w[j]·table[idx[j],:] for j in bag b.
func (*CPU) EmbeddingBag(out, table Buffer, idx, offsets IntBuffer, w Buffer, batch, dim int) {
	od, td, id, offd, wd := f(out), f(table), fi(idx), fi(offsets), f(w)
	work := int(offd[batch]) * dim
	body := func(lo, hi int) {
		for b := lo; b < hi; b++ {
			o := od[b*dim : (b+1)*dim]
			for i := range o {
				o[i] = 0
			}
			for j := offd[b]; j < offd[b+1]; j++ {
				wj := wd[j]
				row := td[int(id[j])*dim : (int(id[j])+1)*dim]
				for i, v := range row {
					o[i] += wj * v
				}
			}
		}
	}
	if work < parallelMin || batch < 2 {
		body(0, batch)
		return
	}
	w2 := min(runtime.GOMAXPROCS(0), batch, 8)
	chunk := (batch + w2 - 1) / w2
	var wg sync.WaitGroup
	for lo := 0; lo < batch; lo += chunk {
		hi := min(lo+chunk, batch)
		wg.Add(1)
		go func() { defer wg.Done(); body(lo, hi) }()
	}
	wg.Wait()
}

// EmbeddingBagBackward accumulates gradTable[idx[j],:] += w[j]·gradOut[b,:].
func (*CPU) EmbeddingBagBackward(gradTable, gradOut Buffer, idx, offsets IntBuffer, w Buffer, batch, dim int) {
	gt, gd, id, offd, wd := f(gradTable), f(gradOut), fi(idx), fi(offsets), f(w)
	for b := 0; b < batch; b++ {
		g := gd[b*dim : (b+1)*dim]
		for j := offd[b]; j < offd[b+1]; j++ {
			wj := wd[j]
			row := gt[int(id[j])*dim : (int(id[j])+1)*dim]
			for i, v := range g {
				row[i] += wj * v
			}
		}
	}
}

// AdamW updates n parameters in place (see the interface for the formula).
func (*CPU) AdamW(p, g, m, v Buffer, n int, lr, beta1, beta2, eps, wd float32, step int) {
	pd, gd, md, vd := f(p)[:n], f(g)[:n], f(m)[:n], f(v)[:n]
	bc1 := float32(1 - math.Pow(float64(beta1), float64(step)))
	bc2 := float32(1 - math.Pow(float64(beta2), float64(step)))
	parallel(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			gi := gd[i]
			mi := beta1*md[i] + (1-beta1)*gi
			vi := beta2*vd[i] + (1-beta2)*gi*gi
			md[i], vd[i] = mi, vi
			mhat := mi / bc1
			vhat := vi / bc2
			pd[i] -= lr * (mhat/(float32(math.Sqrt(float64(vhat)))+eps) + wd*pd[i])
		}
	})
}

// Lerp sets dst = b·dst + (1−b)·src over the first n elements (Lerper).
func (*CPU) Lerp(dst, src Buffer, n int, b float32) {
	dd, sd := f(dst)[:n], f(src)[:n]
	parallel(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dd[i] = b*dd[i] + (1-b)*sd[i]
		}
	})
}

var _ Lerper = (*CPU)(nil)

// Sync returns nil: the CPU backend completes every operation before returning.
func (*CPU) Sync() error { return nil }

// Close releases nothing: buffers are garbage collected.
func (*CPU) Close() error { return nil }

var _ Backend = (*CPU)(nil)
