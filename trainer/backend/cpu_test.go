package backend

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func upload(b Backend, s []float32) Buffer {
	buf := b.Alloc(len(s))
	b.Upload(buf, s)
	return buf
}

func download(b Backend, buf Buffer) []float32 {
	out := make([]float32, buf.Len())
	b.Download(out, buf)
	return out
}

func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestCPUGemmAllTransposes(t *testing.T) {
	t.Parallel()
	be := NewCPU()
	r := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {64, 5, 64}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				a, b, c := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, m*n)
				want := make([]float32, m*n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var s float64
						for l := 0; l < k; l++ {
							av := a[i*k+l]
							if ta {
								av = a[l*m+i]
							}
							bv := b[l*n+j]
							if tb {
								bv = b[j*k+l]
							}
							s += float64(av) * float64(bv)
						}
						want[i*n+j] = float32(0.5*s + 2*float64(c[i*n+j]))
					}
				}
				cb := upload(be, c)
				be.Gemm(ta, tb, m, n, k, 0.5, upload(be, a), upload(be, b), 2, cb)
				near(t, "gemm", download(be, cb), want, 1e-4)
			}
		}
	}
}

func TestCPUElementwise(t *testing.T) {
	t.Parallel()
	be := NewCPU()
	r := rand.New(rand.NewPCG(3, 4))
	rows, cols := 7, 5
	x, v := randSlice(r, rows*cols), randSlice(r, cols)

	xb := upload(be, x)
	be.AddRowVector(xb, upload(be, v), rows, cols)
	want := make([]float32, len(x))
	for i := range x {
		want[i] = x[i] + v[i%cols]
	}
	near(t, "addrow", download(be, xb), want, 1e-6)

	dst := randSlice(r, cols)
	db := upload(be, dst)
	be.SumRows(db, upload(be, x), rows, cols)
	sums := append([]float32(nil), dst...)
	for i := range x {
		sums[i%cols] += x[i]
	}
	near(t, "sumrows", download(be, db), sums, 1e-5)

	yb := be.Alloc(len(x))
	be.ReLU(yb, upload(be, x), len(x))
	y := download(be, yb)
	dy := randSlice(r, len(x))
	dxb := be.Alloc(len(x))
	be.ReLUBackward(dxb, upload(be, dy), yb, len(x))
	dx := download(be, dxb)
	for i := range x {
		wy, wdx := x[i], dy[i]
		if x[i] <= 0 {
			wy, wdx = 0, 0
		}
		if y[i] != wy || dx[i] != wdx {
			t.Fatalf("relu[%d]: y=%v dx=%v want %v %v", i, y[i], dx[i], wy, wdx)
		}
	}
	// In place (y == x) as the interface allows.
	be.ReLU(xb, xb, len(x))
	for _, vv := range download(be, xb) {
		if vv < 0 {
			t.Fatal("in-place relu left a negative")
		}
	}

	big := be.Alloc(parallelMin*2 + 3)
	be.Fill(big, big.Len()-1, 1.5)
	got := download(be, big)
	for i, vv := range got {
		want := float32(1.5)
		if i == len(got)-1 {
			want = 0
		}
		if vv != want {
			t.Fatalf("fill[%d] = %v, want %v", i, vv, want)
		}
	}
}

func TestCPUEmbeddingBag(t *testing.T) {
	t.Parallel()
	be := NewCPU()
	r := rand.New(rand.NewPCG(5, 6))
	rows, dim := 50, 6
	table := randSlice(r, rows*dim)
	offsets := []int32{0, 3, 3, 8} // bag 1 is empty
	idx := []int32{1, 49, 1, 0, 7, 7, 20, 3}
	w := randSlice(r, len(idx))
	batch := len(offsets) - 1
	ib, ob := be.AllocInt(len(idx)), be.AllocInt(len(offsets))
	be.UploadInt(ib, idx)
	be.UploadInt(ob, offsets)
	out := upload(be, randSlice(r, batch*dim)) // overwritten
	tb, wb := upload(be, table), upload(be, w)
	be.EmbeddingBag(out, tb, ib, ob, wb, batch, dim)
	want := make([]float32, batch*dim)
	for b := 0; b < batch; b++ {
		for j := offsets[b]; j < offsets[b+1]; j++ {
			for i := 0; i < dim; i++ {
				want[b*dim+i] += w[j] * table[int(idx[j])*dim+i]
			}
		}
	}
	near(t, "embbag", download(be, out), want, 1e-5)

	gout := randSlice(r, batch*dim)
	gt := randSlice(r, rows*dim)
	gtb := upload(be, gt)
	be.EmbeddingBagBackward(gtb, upload(be, gout), ib, ob, wb, batch, dim)
	wantG := append([]float32(nil), gt...)
	for b := 0; b < batch; b++ {
		for j := offsets[b]; j < offsets[b+1]; j++ {
			for i := 0; i < dim; i++ {
				wantG[int(idx[j])*dim+i] += w[j] * gout[b*dim+i]
			}
		}
	}
	near(t, "embbag backward", download(be, gtb), wantG, 1e-5)
}

func TestCPUAdamW(t *testing.T) {
	t.Parallel()
	be := NewCPU()
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{5, parallelMin + 17} {
		p, g := randSlice(r, n), randSlice(r, n)
		m, v := make([]float32, n), make([]float32, n)
		pb, gb, mb, vb := upload(be, p), upload(be, g), be.Alloc(n), be.Alloc(n)
		const lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.01
		for step := 1; step <= 3; step++ {
			be.AdamW(pb, gb, mb, vb, n, lr, b1, b2, eps, wd, step)
			for i := range p {
				m[i] = b1*m[i] + (1-b1)*g[i]
				v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
				mh := float64(m[i]) / (1 - math.Pow(b1, float64(step)))
				vh := float64(v[i]) / (1 - math.Pow(b2, float64(step)))
				p[i] -= float32(lr * (mh/(math.Sqrt(vh)+eps) + wd*float64(p[i])))
			}
		}
		near(t, "adamw p", download(be, pb), p, 1e-5)
		near(t, "adamw m", download(be, mb), m, 1e-6)
		near(t, "adamw v", download(be, vb), v, 1e-6)
	}
}

// Lerp is the moving-average update the rank-1 Gemm fallback computes.
func TestCPULerpIsTheGemmFallback(t *testing.T) {
	t.Parallel()
	be := NewCPU()
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{5, parallelMin + 17} {
		avg, w := randSlice(r, n), randSlice(r, n)
		const b = 0.9
		want := make([]float32, n)
		for i := range want {
			want[i] = b*avg[i] + (1-b)*w[i]
		}
		ab, wb := upload(be, avg), upload(be, w)
		be.Lerp(ab, wb, n, b)
		near(t, "lerp", download(be, ab), want, 1e-6)
		gb, one := upload(be, avg), upload(be, []float32{1})
		be.Gemm(false, false, 1, n, 1, 1-b, one, wb, b, gb)
		near(t, "gemm fallback", download(be, gb), want, 1e-6)
	}
}

func TestOpen(t *testing.T) {
	saved := OpenCUDA
	defer func() { OpenCUDA = saved }()
	OpenCUDA = nil
	b, why, err := Open("auto")
	if err != nil || b.Name() != "cpu" || why == "" {
		t.Fatalf("auto without cuda: %v %q %v", b, why, err)
	}
	if _, _, err := Open("cuda"); err == nil {
		t.Fatal("cuda without an implementation must fail")
	}
	if _, _, err := Open("tpu"); err == nil {
		t.Fatal("unknown device must fail")
	}
	OpenCUDA = func() (Backend, error) { return nil, ErrNoCUDA }
	b, why, err = Open("auto")
	if err != nil || b.Name() != "cpu" {
		t.Fatalf("auto with failing cuda: %v %v", b, err)
	}
	t.Log(why)
}

// BenchmarkMovingAverage is the trainer's moving-average update of a
// 1 M-float table (the additive critic's text table at rank 4): Lerp, and
// the rank-1 Gemm other backends use.
func BenchmarkMovingAverage(b *testing.B) {
	be := NewCPU()
	const n = 1 << 20
	w, avg, one := be.Alloc(n), be.Alloc(n), upload(be, []float32{1})
	b.Run("lerp", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			be.Lerp(avg, w, n, 0.98)
		}
	})
	b.Run("gemm", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			be.Gemm(false, false, 1, n, 1, 0.02, one, w, 0.98, avg)
		}
	})
}
