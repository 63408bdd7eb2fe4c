package backend

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// openTestCUDA opens GPU 0 for a test, or skips when the machine has no NVIDIA
// GPU. The backend is closed (and must close cleanly) when the test ends.
func openTestCUDA(tb testing.TB) *cudaBackend {
	tb.Helper()
	c, err := newCUDA(0)
	if err != nil {
		if !NVIDIAPresent() {
			tb.Skipf("no NVIDIA GPU on this machine (no /dev/nvidia0, no /proc/driver/nvidia): %v", err)
		}
		tb.Fatalf("an NVIDIA device is present but the CUDA backend does not open: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("close cuda backend: %v", err)
		}
	})
	return c
}

// TestOpenCUDARegistered checks that this file's init wires OpenCUDA and that,
// on a machine without a GPU, opening says why and points at --device cpu.
func TestOpenCUDARegistered(t *testing.T) {
	t.Parallel()
	if OpenCUDA == nil {
		t.Fatal("OpenCUDA is nil: cuda.go's init did not register the backend")
	}
	be, err := OpenCUDA()
	if NVIDIAPresent() {
		if err != nil {
			t.Fatalf("an NVIDIA device is present but OpenCUDA fails: %v", err)
		}
		defer be.Close()
		if !strings.HasPrefix(be.Name(), "cuda:") || len(be.Name()) <= len("cuda:") {
			t.Fatalf("Name() = %q, want cuda:<device name>", be.Name())
		}
		return
	}
	if err == nil {
		be.Close()
		t.Fatal("OpenCUDA succeeded on a machine with no NVIDIA device")
	}
	if !errors.Is(err, ErrNoCUDADriver) && !errors.Is(err, ErrNoCUDADevice) && !errors.Is(err, ErrNoCUBLAS) {
		t.Fatalf("OpenCUDA error %v is none of ErrNoCUDADriver, ErrNoCUDADevice, ErrNoCUBLAS", err)
	}
	if !strings.Contains(err.Error(), "--device cpu") {
		t.Fatalf("OpenCUDA error %q does not tell the user about --device cpu", err)
	}
	// Open("auto") must fall back to the CPU and say why.
	b, why, err := Open("auto")
	if err != nil || b.Name() != "cpu" || !strings.Contains(why, "cuda") {
		t.Fatalf(`Open("auto") = %v, %q, %v; want the cpu backend and a reason naming cuda`, b, why, err)
	}
}

// colMajorSgemm is BLAS's reference Sgemm on column-major storage, the
// contract cublasSgemm implements.
func colMajorSgemm(ta, tb int32, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	at := func(i, l int) float32 { // op(A)[i,l]
		if ta == cublasOpT {
			return a[l+i*lda]
		}
		return a[i+l*lda]
	}
	bt := func(l, j int) float32 { // op(B)[l,j]
		if tb == cublasOpT {
			return b[j+l*ldb]
		}
		return b[l+j*ldb]
	}
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var s float32
			for l := 0; l < k; l++ {
				s += at(i, l) * bt(l, j)
			}
			c[i+j*ldc] = alpha*s + beta*c[i+j*ldc]
		}
	}
}

// TestGemmArgsRowMajor checks, without a GPU, that gemmArgs' operand swap,
// transposes and leading dimensions turn column-major Sgemm into the
// row-major Gemm of the Backend contract, for all four transpose combinations.
func TestGemmArgsRowMajor(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	cpu := NewCPU()
	for _, sz := range [][3]int{{5, 3, 4}, {1, 7, 2}, {6, 1, 9}, {4, 4, 1}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, transA := range []bool{false, true} {
			for _, transB := range []bool{false, true} {
				a, b, c := gpuTestRand(rng, m*k), gpuTestRand(rng, k*n), gpuTestRand(rng, m*n)
				want := gpuRefGemm(cpu, transA, transB, m, n, k, 0.7, a, b, 0.3, c)
				got := append([]float32(nil), c...)
				ta, tb, cm, cn, ck, lda, ldb, ldc := gemmArgs(transA, transB, m, n, k)
				colMajorSgemm(ta, tb, cm, cn, ck, 0.7, b, lda, a, ldb, 0.3, got, ldc)
				gpuAssertClose(t, "gemm", got, want, 1e-5, 1e-5)
			}
		}
	}
}

func gpuRefGemm(cpu *CPU, transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) []float32 {
	A, B, C := cpu.Alloc(len(a)), cpu.Alloc(len(b)), cpu.Alloc(len(c))
	cpu.Upload(A, a)
	cpu.Upload(B, b)
	cpu.Upload(C, c)
	cpu.Gemm(transA, transB, m, n, k, alpha, A, B, beta, C)
	out := make([]float32, len(c))
	cpu.Download(out, C)
	return out
}

func gpuTestRand(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

// gpuAssertClose fails the test at the worst element beyond |got−want| ≤ abs + rel·|want|.
func gpuAssertClose(t testing.TB, what string, got, want []float32, rel, abs float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, -1
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		d := math.Abs(g-w) - (abs + rel*math.Abs(w))
		if math.IsNaN(g) != math.IsNaN(w) || d > worst {
			worst, at = math.Inf(1), i
			if !math.IsNaN(d) {
				worst = d
			}
		}
	}
	if at >= 0 {
		t.Fatalf("%s[%d] = %g, want %g (rel %g, abs %g)", what, at, got[at], want[at], rel, abs)
	}
}

// gpuPair holds the same data on the CPU and on the GPU.
type gpuPair struct {
	cpu, gpu Backend
}

func (p gpuPair) buf(data []float32) (Buffer, Buffer) {
	c, g := p.cpu.Alloc(len(data)), p.gpu.Alloc(len(data))
	p.cpu.Upload(c, data)
	p.gpu.Upload(g, data)
	return c, g
}

func (p gpuPair) ints(data []int32) (IntBuffer, IntBuffer) {
	c, g := p.cpu.AllocInt(len(data)), p.gpu.AllocInt(len(data))
	p.cpu.UploadInt(c, data)
	p.gpu.UploadInt(g, data)
	return c, g
}

// same downloads both buffers and compares them.
func (p gpuPair) same(t *testing.T, what string, c, g Buffer, rel, abs float64) {
	t.Helper()
	want, got := make([]float32, c.Len()), make([]float32, g.Len())
	p.cpu.Download(want, c)
	p.gpu.Download(got, g)
	if err := p.gpu.Sync(); err != nil {
		t.Fatalf("%s: cuda: %v", what, err)
	}
	gpuAssertClose(t, what, got, want, rel, abs)
}

// gpuRandomBags draws batch bags of 0..maxBag entries over rows table rows
// (repeats included, so the backward pass's atomics collide).
func gpuRandomBags(rng *rand.Rand, batch, maxBag, rows int) (idx, offsets []int32, w []float32) {
	offsets = []int32{0}
	for b := 0; b < batch; b++ {
		for range rng.IntN(maxBag + 1) {
			idx = append(idx, int32(rng.IntN(rows)))
			w = append(w, float32(rng.NormFloat64()))
		}
		offsets = append(offsets, int32(len(idx)))
	}
	return idx, offsets, w
}

// TestCUDAOpsMatchCPU runs every elementwise, embedding and optimizer
// operation on random data on both backends and compares the results.
func TestCUDAOpsMatchCPU(t *testing.T) {
	t.Parallel()
	gpu := openTestCUDA(t)
	p := gpuPair{cpu: NewCPU(), gpu: gpu}
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 517, 37 // odd sizes: partial blocks, uneven chunks

	t.Run("Alloc is zeroed, Upload/Download round-trip", func(t *testing.T) {
		x := gpu.Alloc(1000)
		got := make([]float32, 1000)
		for i := range got {
			got[i] = 1
		}
		gpu.Download(got, x)
		gpuAssertClose(t, "alloc", got, make([]float32, 1000), 0, 0)
		data := gpuTestRand(rng, 600)
		gpu.Upload(x, data) // a prefix only
		got = make([]float32, 600)
		gpu.Download(got, x)
		gpuAssertClose(t, "round-trip", got, data, 0, 0)
		tail := make([]float32, 1000)
		gpu.Download(tail, x)
		gpuAssertClose(t, "tail", tail[600:], make([]float32, 400), 0, 0)
		if err := gpu.Sync(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Fill", func(t *testing.T) {
		c, g := p.buf(gpuTestRand(rng, 3000))
		p.cpu.Fill(c, 2500, 1.25)
		p.gpu.Fill(g, 2500, 1.25)
		p.same(t, "fill", c, g, 0, 0)
	})
	t.Run("AddRowVector", func(t *testing.T) {
		xc, xg := p.buf(gpuTestRand(rng, rows*cols))
		vc, vg := p.buf(gpuTestRand(rng, cols))
		p.cpu.AddRowVector(xc, vc, rows, cols)
		p.gpu.AddRowVector(xg, vg, rows, cols)
		p.same(t, "add_row_vector", xc, xg, 1e-6, 1e-6)
	})
	t.Run("SumRows accumulates", func(t *testing.T) {
		xc, xg := p.buf(gpuTestRand(rng, rows*cols))
		dc, dg := p.buf(gpuTestRand(rng, cols))
		p.cpu.SumRows(dc, xc, rows, cols)
		p.gpu.SumRows(dg, xg, rows, cols)
		p.same(t, "sum_rows", dc, dg, 1e-4, 1e-4)
	})
	t.Run("ReLU", func(t *testing.T) {
		x := gpuTestRand(rng, 5000)
		xc, xg := p.buf(x)
		yc, yg := p.buf(make([]float32, 5000))
		p.cpu.ReLU(yc, xc, 4000)
		p.gpu.ReLU(yg, xg, 4000)
		p.same(t, "relu", yc, yg, 0, 0)
		p.cpu.ReLU(xc, xc, 5000) // in place
		p.gpu.ReLU(xg, xg, 5000)
		p.same(t, "relu in place", xc, xg, 0, 0)
	})
	t.Run("ReLUBackward", func(t *testing.T) {
		dyc, dyg := p.buf(gpuTestRand(rng, 5000))
		yc, yg := p.buf(gpuTestRand(rng, 5000))
		dxc, dxg := p.buf(make([]float32, 5000))
		p.cpu.ReLUBackward(dxc, dyc, yc, 5000)
		p.gpu.ReLUBackward(dxg, dyg, yg, 5000)
		p.same(t, "relu_backward", dxc, dxg, 0, 0)
		p.cpu.ReLUBackward(dyc, dyc, yc, 5000) // in place
		p.gpu.ReLUBackward(dyg, dyg, yg, 5000)
		p.same(t, "relu_backward in place", dyc, dyg, 0, 0)
	})
	t.Run("EmbeddingBag forward and backward", func(t *testing.T) {
		const tableRows, dim, batch = 50, 24, 300
		idx, offsets, w := gpuRandomBags(rng, batch, 9, tableRows)
		tc, tg := p.buf(gpuTestRand(rng, tableRows*dim))
		ic, ig := p.ints(idx)
		oc, og := p.ints(offsets)
		wc, wg := p.buf(w)
		outc, outg := p.buf(gpuTestRand(rng, batch*dim)) // overwritten
		p.cpu.EmbeddingBag(outc, tc, ic, oc, wc, batch, dim)
		p.gpu.EmbeddingBag(outg, tg, ig, og, wg, batch, dim)
		p.same(t, "embedding_bag", outc, outg, 1e-5, 1e-5)

		gradOutc, gradOutg := p.buf(gpuTestRand(rng, batch*dim))
		gtc, gtg := p.buf(gpuTestRand(rng, tableRows*dim)) // accumulated into
		p.cpu.EmbeddingBagBackward(gtc, gradOutc, ic, oc, wc, batch, dim)
		p.gpu.EmbeddingBagBackward(gtg, gradOutg, ig, og, wg, batch, dim)
		p.same(t, "embedding_bag_backward", gtc, gtg, 1e-4, 1e-4)
	})
	t.Run("AdamW", func(t *testing.T) {
		const n = 4099
		pc, pg := p.buf(gpuTestRand(rng, n))
		mc, mg := p.buf(make([]float32, n))
		vc, vg := p.buf(make([]float32, n))
		for step := 1; step <= 5; step++ {
			gc, gg := p.buf(gpuTestRand(rng, n))
			p.cpu.AdamW(pc, gc, mc, vc, n, 0.01, 0.9, 0.999, 1e-8, 0.05, step)
			p.gpu.AdamW(pg, gg, mg, vg, n, 0.01, 0.9, 0.999, 1e-8, 0.05, step)
		}
		p.same(t, "adamw m", mc, mg, 1e-5, 1e-6)
		p.same(t, "adamw v", vc, vg, 1e-5, 1e-6)
		p.same(t, "adamw p", pc, pg, 1e-5, 1e-6)
	})
}

// TestCUDAGemmMatchesCPU checks cuBLAS Gemm against the CPU backend for all
// four transpose combinations, with alpha, beta and odd sizes.
func TestCUDAGemmMatchesCPU(t *testing.T) {
	t.Parallel()
	gpu := openTestCUDA(t)
	p := gpuPair{cpu: NewCPU(), gpu: gpu}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sz := range [][3]int{{37, 23, 19}, {257, 129, 65}, {1, 300, 7}, {64, 1, 512}, {3, 4, 0}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, transA := range []bool{false, true} {
			for _, transB := range []bool{false, true} {
				ac, ag := p.buf(gpuTestRand(rng, m*k))
				bc, bg := p.buf(gpuTestRand(rng, k*n))
				cc, cg := p.buf(gpuTestRand(rng, m*n))
				p.cpu.Gemm(transA, transB, m, n, k, 0.7, ac, bc, 0.3, cc)
				p.gpu.Gemm(transA, transB, m, n, k, 0.7, ag, bg, 0.3, cg)
				p.same(t, "gemm", cc, cg, 1e-4, 1e-4)
			}
		}
	}
}

// TestCUDAErrorsAreRecorded checks that misuse never panics: the operation is
// skipped, Sync returns the first error, and a closed backend says so.
func TestCUDAErrorsAreRecorded(t *testing.T) {
	t.Parallel()
	t.Run("short buffer", func(t *testing.T) {
		gpu := openTestCUDA(t)
		x := gpu.Alloc(10)
		gpu.Fill(x, 11, 1)
		if err := gpu.Sync(); !errors.Is(err, ErrCUDAArg) {
			t.Fatalf("Sync() = %v, want ErrCUDAArg", err)
		}
		gpu.Fill(x, 5, 1) // skipped: the first error is sticky
		if err := gpu.Sync(); !errors.Is(err, ErrCUDAArg) || !strings.Contains(err.Error(), "11 needed") {
			t.Fatalf("Sync() = %v, want the first error again", err)
		}
	})
	t.Run("foreign buffer", func(t *testing.T) {
		gpu := openTestCUDA(t)
		gpu.ReLU(NewCPU().Alloc(4), gpu.Alloc(4), 4)
		if err := gpu.Sync(); !errors.Is(err, ErrCUDAArg) {
			t.Fatalf("Sync() = %v, want ErrCUDAArg", err)
		}
	})
	t.Run("freed buffer", func(t *testing.T) {
		gpu := openTestCUDA(t)
		x := gpu.Alloc(4)
		gpu.Free(x)
		gpu.Free(x) // twice is harmless
		gpu.Fill(x, 4, 1)
		if err := gpu.Sync(); !errors.Is(err, ErrCUDAArg) {
			t.Fatalf("Sync() = %v, want ErrCUDAArg", err)
		}
	})
	t.Run("closed backend", func(t *testing.T) {
		gpu, err := newCUDA(0)
		if err != nil {
			openTestCUDA(t) // skips or fails with the reason
			t.Fatal(err)
		}
		x := gpu.Alloc(4)
		if err := gpu.Close(); err != nil {
			t.Fatal(err)
		}
		if err := gpu.Close(); err != nil {
			t.Fatalf("second Close() = %v, want nil", err)
		}
		gpu.Fill(x, 4, 1)
		if err := gpu.Sync(); !errors.Is(err, ErrCUDAClosed) {
			t.Fatalf("Sync() after Close = %v, want ErrCUDAClosed", err)
		}
	})
}
