package backend

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

func init() {
	OpenCUDA = func() (Backend, error) { return NewCUDA(0) }
}

// cudaThreads is the block size of every kernel launch.
const cudaThreads = 256

// cudaMaxElems bounds every element count a kernel sees, so that the kernels'
// 32-bit grid-stride indices (i + stride) cannot overflow.
const cudaMaxElems = 1 << 30

// cudaSumRowsChunk is how many rows one sum_rows thread adds before its atomic
// add into dst.
const cudaSumRowsChunk = 32

// cudaBuf is a float32 device buffer.
type cudaBuf struct {
	ptr   uint64 // CUdeviceptr; 0 for an empty or failed allocation
	n     int
	owner *cudaBackend
}

// Len implements Buffer.
func (b *cudaBuf) Len() int { return b.n }

// cudaIntBuf is an int32 device buffer.
type cudaIntBuf struct {
	ptr   uint64
	n     int
	owner *cudaBackend
}

// Len implements IntBuffer.
func (b *cudaIntBuf) Len() int { return b.n }

// cudaBackend runs the Backend operations on one GPU: buffers in device
// memory, matrix products in cuBLAS, the rest as the PTX kernels of
// kernels/kernels.cu, all queued in order on one stream. Operations return no
// error: the first failure is recorded, every later operation is skipped, and
// Sync returns it. Like every Backend it is not safe for concurrent use; it
// may be used from any goroutine (each call binds the context to its thread).
type cudaBackend struct {
	lib     *cudaLib
	ordinal int
	dev     int32
	name    string
	ctx     uintptr // primary context of dev
	stream  uintptr
	blas    uintptr // cublasHandle_t
	module  uintptr
	fns     [numKernels]uintptr
	maxGrid int // blocks per launch at most (a few per multiprocessor)

	live   map[uint64]struct{} // allocations not yet freed
	err    error               // first failure; sticky
	closed bool

	// Launch scratch, kept here so a launch allocates nothing: argp[i] points
	// at argv[i], and cuLaunchKernel copies the values before it returns.
	argv         [16]uint64
	argp         [16]unsafe.Pointer
	alpha, beta  float32
	retainedCtx  bool
	createdBLAS  bool
	loadedModule bool
}

// NewCUDA opens GPU ordinal (0 is the first visible device): it loads the
// driver and cuBLAS, retains the device's primary context, creates a stream
// and a cuBLAS handle on it, and JIT-loads the embedded kernels. Errors say
// what is missing: ErrNoCUDADriver, ErrNoCUBLAS, ErrNoCUDADevice,
// ErrKernelLoad (with the JIT log) or a *CUDAError.
func NewCUDA(ordinal int) (Backend, error) {
	c, err := newCUDA(ordinal)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func newCUDA(ordinal int) (*cudaBackend, error) {
	l, err := loadCUDA()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if r := l.cuInit(0); r != cudaSuccess {
		if r == cudaErrorNoDevice {
			return nil, fmt.Errorf("%w (cuInit: %v)", ErrNoCUDADevice, l.check("cuInit", r))
		}
		return nil, l.check("cuInit", r)
	}
	var count int32
	if err := l.check("cuDeviceGetCount", l.cuDeviceGetCount(&count)); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= int(count) {
		return nil, fmt.Errorf("%w (device %d asked, %d visible)", ErrNoCUDADevice, ordinal, count)
	}
	c := &cudaBackend{lib: l, ordinal: ordinal, live: map[uint64]struct{}{}}
	for i := range c.argp {
		c.argp[i] = unsafe.Pointer(&c.argv[i])
	}
	if err := c.open(); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// open does the device set-up of newCUDA; release undoes what it did.
func (c *cudaBackend) open() error {
	l := c.lib
	if err := l.check("cuDeviceGet", l.cuDeviceGet(&c.dev, int32(c.ordinal))); err != nil {
		return err
	}
	name := make([]byte, 256)
	if err := l.check("cuDeviceGetName", l.cuDeviceGetName(&name[0], int32(len(name)), c.dev)); err != nil {
		return err
	}
	c.name = "cuda:" + cString(name)
	var sms int32
	if err := l.check("cuDeviceGetAttribute", l.cuDeviceGetAttribute(&sms, cuAttrMultiprocessorCnt, c.dev)); err != nil {
		return err
	}
	c.maxGrid = max(int(sms), 1) * 8

	if err := l.check("cuDevicePrimaryCtxRetain", l.cuDevicePrimaryCtxRet(&c.ctx, c.dev)); err != nil {
		return err
	}
	c.retainedCtx = true
	if err := l.check("cuCtxSetCurrent", l.cuCtxSetCurrent(c.ctx)); err != nil {
		return err
	}
	if err := l.check("cuStreamCreate", l.cuStreamCreate(&c.stream, cuStreamNonBlocking)); err != nil {
		return err
	}
	if err := checkBLAS("cublasCreate_v2", l.cublasCreate(&c.blas)); err != nil {
		return err
	}
	c.createdBLAS = true
	if err := checkBLAS("cublasSetStream_v2", l.cublasSetStream(c.blas, c.stream)); err != nil {
		return err
	}
	if l.cublasSetMathMode != nil {
		if err := checkBLAS("cublasSetMathMode", l.cublasSetMathMode(c.blas, cublasDefaultMath)); err != nil {
			return err
		}
	}
	return c.loadKernels()
}

// loadKernels JIT-compiles the embedded PTX and resolves every kernel.
func (c *cudaBackend) loadKernels() error {
	l := c.lib
	image := append([]byte(kernelPTX), 0)
	errLog := make([]byte, cudaJitLogBytes)
	infoLog := make([]byte, cudaJitLogBytes)
	opts := []int32{cuJitErrorLogBuffer, cuJitErrorLogBufferSize, cuJitInfoLogBuffer, cuJitInfoLogBufferSize}
	vals := []uintptr{
		uintptr(unsafe.Pointer(&errLog[0])), uintptr(len(errLog)),
		uintptr(unsafe.Pointer(&infoLog[0])), uintptr(len(infoLog)),
	}
	r := l.cuModuleLoadDataEx(&c.module, &image[0], uint32(len(opts)), &opts[0], &vals[0])
	runtime.KeepAlive(image)
	runtime.KeepAlive(errLog)
	runtime.KeepAlive(infoLog)
	if r != cudaSuccess {
		return fmt.Errorf("%w: %v; JIT log: %s", ErrKernelLoad, l.check("cuModuleLoadDataEx", r), cString(errLog))
	}
	c.loadedModule = true
	for i, k := range cudaKernels {
		if err := l.check("cuModuleGetFunction("+k.name+")", l.cuModuleGetFunction(&c.fns[i], c.module, k.name)); err != nil {
			return fmt.Errorf("%w: %w", ErrKernelLoad, err)
		}
	}
	return nil
}

// release frees what open acquired, in reverse order; it returns the first
// failure. The context must be current (or about to be made current here).
func (c *cudaBackend) release() error {
	l := c.lib
	var errs []error
	if c.ctx != 0 {
		errs = append(errs, l.check("cuCtxSetCurrent", l.cuCtxSetCurrent(c.ctx)))
	}
	for p := range c.live {
		errs = append(errs, l.check("cuMemFree", l.cuMemFree(p)))
		delete(c.live, p)
	}
	if c.loadedModule {
		errs = append(errs, l.check("cuModuleUnload", l.cuModuleUnload(c.module)))
		c.loadedModule = false
	}
	if c.createdBLAS {
		errs = append(errs, checkBLAS("cublasDestroy_v2", l.cublasDestroy(c.blas)))
		c.createdBLAS = false
	}
	if c.stream != 0 {
		errs = append(errs, l.check("cuStreamDestroy", l.cuStreamDestroy(c.stream)))
		c.stream = 0
	}
	if c.retainedCtx {
		errs = append(errs, l.check("cuDevicePrimaryCtxRelease", l.cuDevicePrimaryCtxRel(c.dev)))
		c.retainedCtx = false
	}
	return errors.Join(errs...)
}

// Name implements Backend: "cuda:<device name>".
func (c *cudaBackend) Name() string { return c.name }

// fail records err if it is the first failure.
func (c *cudaBackend) fail(err error) {
	if err != nil && c.err == nil {
		c.err = err
	}
}

// enter makes the context current on this goroutine's thread, locked for the
// call; it reports false (and records why) when the operation must be skipped.
// Every true return must be paired with a deferred c.leave().
func (c *cudaBackend) enter() bool {
	if c.closed {
		c.fail(ErrCUDAClosed)
		return false
	}
	if c.err != nil {
		return false
	}
	runtime.LockOSThread()
	if err := c.lib.check("cuCtxSetCurrent", c.lib.cuCtxSetCurrent(c.ctx)); err != nil {
		runtime.UnlockOSThread()
		c.fail(err)
		return false
	}
	return true
}

func (c *cudaBackend) leave() { runtime.UnlockOSThread() }

// argErr records an ErrCUDAArg describing a bad call of op.
func (c *cudaBackend) argErr(op, format string, a ...any) {
	c.fail(fmt.Errorf("%w: %s: %s", ErrCUDAArg, op, fmt.Sprintf(format, a...)))
}

// fbuf returns the device pointer of x after checking that it belongs to this
// backend, is live and holds at least need elements.
func (c *cudaBackend) fbuf(op, what string, x Buffer, need int) (uint64, bool) {
	b, ok := x.(*cudaBuf)
	switch {
	case !ok || b == nil:
		c.argErr(op, "%s is %T, not a cuda buffer", what, x)
		return 0, false
	case b.owner != c:
		c.argErr(op, "%s belongs to another cuda backend", what)
		return 0, false
	case b.n > 0 && b.ptr == 0:
		c.argErr(op, "%s was freed", what)
		return 0, false
	case need < 0 || need > b.n:
		c.argErr(op, "%s holds %d elements, %d needed", what, b.n, need)
		return 0, false
	}
	return b.ptr, true
}

// ibuf is fbuf for int buffers.
func (c *cudaBackend) ibuf(op, what string, x IntBuffer, need int) (uint64, bool) {
	b, ok := x.(*cudaIntBuf)
	switch {
	case !ok || b == nil:
		c.argErr(op, "%s is %T, not a cuda int buffer", what, x)
		return 0, false
	case b.owner != c:
		c.argErr(op, "%s belongs to another cuda backend", what)
		return 0, false
	case b.n > 0 && b.ptr == 0:
		c.argErr(op, "%s was freed", what)
		return 0, false
	case need < 0 || need > b.n:
		c.argErr(op, "%s holds %d elements, %d needed", what, b.n, need)
		return 0, false
	}
	return b.ptr, true
}

// alloc returns n zeroed 4-byte elements of device memory (0 when n is 0).
func (c *cudaBackend) alloc(op string, n int) uint64 {
	if n <= 0 {
		if n < 0 {
			c.argErr(op, "negative length %d", n)
		}
		return 0
	}
	if !c.enter() {
		return 0
	}
	defer c.leave()
	var p uint64
	if err := c.lib.check("cuMemAlloc", c.lib.cuMemAlloc(&p, uint64(n)*4)); err != nil {
		c.fail(fmt.Errorf("%s(%d): %w", op, n, err))
		return 0
	}
	c.live[p] = struct{}{}
	c.fail(c.lib.check("cuMemsetD32Async", c.lib.cuMemsetD32Async(p, 0, uint64(n), c.stream)))
	return p
}

// Alloc implements Backend. On failure the error is recorded (Sync returns
// it) and the returned buffer is unusable.
func (c *cudaBackend) Alloc(n int) Buffer {
	return &cudaBuf{ptr: c.alloc("Alloc", n), n: max(n, 0), owner: c}
}

// AllocInt implements Backend.
func (c *cudaBackend) AllocInt(n int) IntBuffer {
	return &cudaIntBuf{ptr: c.alloc("AllocInt", n), n: max(n, 0), owner: c}
}

// free releases p; device memory is freed once queued work is done.
func (c *cudaBackend) free(p uint64) {
	if p == 0 || c.closed {
		return
	}
	if _, ok := c.live[p]; !ok {
		return
	}
	delete(c.live, p)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.lib.check("cuCtxSetCurrent", c.lib.cuCtxSetCurrent(c.ctx)); err != nil {
		c.fail(err)
		return
	}
	// Queued kernels may still use p: wait for them before freeing.
	c.fail(c.lib.check("cuStreamSynchronize", c.lib.cuStreamSynchronize(c.stream)))
	c.fail(c.lib.check("cuMemFree", c.lib.cuMemFree(p)))
}

// Free implements Backend. Freeing twice, or a buffer of another backend,
// does nothing.
func (c *cudaBackend) Free(x Buffer) {
	if b, ok := x.(*cudaBuf); ok && b != nil && b.owner == c {
		c.free(b.ptr)
		b.ptr = 0
	}
}

// FreeInt implements Backend.
func (c *cudaBackend) FreeInt(x IntBuffer) {
	if b, ok := x.(*cudaIntBuf); ok && b != nil && b.owner == c {
		c.free(b.ptr)
		b.ptr = 0
	}
}

// Upload implements Backend. The copy is queued; src may be reused as soon as
// Upload returns (the driver stages pageable memory before returning).
func (c *cudaBackend) Upload(dst Buffer, src []float32) {
	p, ok := c.fbuf("Upload", "dst", dst, len(src))
	if !ok || len(src) == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.fail(c.lib.check("cuMemcpyHtoDAsync", c.lib.cuMemcpyHtoDAsync(p, unsafe.Pointer(&src[0]), uint64(len(src))*4, c.stream)))
	runtime.KeepAlive(src)
}

// UploadInt implements Backend.
func (c *cudaBackend) UploadInt(dst IntBuffer, src []int32) {
	p, ok := c.ibuf("UploadInt", "dst", dst, len(src))
	if !ok || len(src) == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.fail(c.lib.check("cuMemcpyHtoDAsync", c.lib.cuMemcpyHtoDAsync(p, unsafe.Pointer(&src[0]), uint64(len(src))*4, c.stream)))
	runtime.KeepAlive(src)
}

// Download implements Backend: it waits for queued work, then copies. After a
// recorded failure dst is left as it was; Sync says why.
func (c *cudaBackend) Download(dst []float32, src Buffer) {
	p, ok := c.fbuf("Download", "src", src, len(dst))
	if !ok || !c.enter() {
		return
	}
	defer c.leave()
	if len(dst) > 0 {
		if err := c.lib.check("cuMemcpyDtoHAsync", c.lib.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), p, uint64(len(dst))*4, c.stream)); err != nil {
			c.fail(err)
			return
		}
	}
	c.fail(c.lib.check("cuStreamSynchronize", c.lib.cuStreamSynchronize(c.stream)))
	runtime.KeepAlive(dst)
}

// karg is one kernel argument and its kind.
type karg struct {
	kind kparam
	bits uint64
}

func aPtr(p uint64) karg    { return karg{kPtr, p} }
func aInt(v int) karg       { return karg{kInt, uint64(uint32(int32(v)))} }
func aFloat(v float32) karg { return karg{kFloat, uint64(math.Float32bits(v))} }
func ceilDiv(a, b int) int  { return (a + b - 1) / b }

// elemsOK reports whether n elements fit the kernels' 32-bit indexing.
func elemsOK(n int) bool { return n >= 0 && n < cudaMaxElems }

// prodOK reports whether an a×b matrix fits the kernels' 32-bit indexing.
func prodOK(a, b int) bool { return a >= 0 && b >= 0 && (b == 0 || a <= (cudaMaxElems-1)/b) }

// blasOp is cuBLAS's operation for a transpose flag.
func blasOp(trans bool) int32 {
	if trans {
		return cublasOpT
	}
	return cublasOpN
}

// launch queues kernel k over work items (grid-stride, so any grid size is
// correct); the caller holds enter(). The arguments must match the kernel's
// parameter list (cudaKernels), which is checked here.
func (c *cudaBackend) launch(k kernelID, work int, args ...karg) {
	spec := cudaKernels[k]
	if len(args) != len(spec.params) || len(args) > len(c.argv) {
		c.fail(fmt.Errorf("%w: kernel %s takes %d arguments, %d passed", ErrCUDAArg, spec.name, len(spec.params), len(args)))
		return
	}
	for i, a := range args {
		if a.kind != spec.params[i] {
			c.fail(fmt.Errorf("%w: kernel %s argument %d has the wrong kind", ErrCUDAArg, spec.name, i))
			return
		}
		c.argv[i] = a.bits
	}
	if work <= 0 {
		return
	}
	blocks := min(ceilDiv(work, cudaThreads), c.maxGrid)
	r := c.lib.cuLaunchKernel(c.fns[k], uint32(blocks), 1, 1, cudaThreads, 1, 1, 0, c.stream, &c.argp[0], nil)
	c.fail(c.lib.check("cuLaunchKernel("+spec.name+")", r))
}

// Fill implements Backend.
func (c *cudaBackend) Fill(x Buffer, n int, v float32) {
	if !elemsOK(n) {
		c.argErr("Fill", "n=%d out of range", n)
		return
	}
	p, ok := c.fbuf("Fill", "x", x, n)
	if !ok || n == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.launch(kFill, n, aPtr(p), aInt(n), aFloat(v))
}

// gemmArgs maps a row-major C = op(A)·op(B) (C m×n) onto column-major cuBLAS:
// a row-major matrix is the column-major view of its transpose, so cuBLAS
// computes Cᵀ = op(B)ᵀ·op(A)ᵀ, with B passed first. It returns cuBLAS's
// transa, transb, m, n, k, lda, ldb, ldc for the call
// Sgemm(transa, transb, m, n, k, alpha, B, lda, A, ldb, beta, C, ldc).
func gemmArgs(transA, transB bool, m, n, k int) (ta, tb int32, cm, cn, ck, lda, ldb, ldc int) {
	// First operand: op(B)ᵀ, n×k. B is stored k×n (ld n) or, transposed, n×k (ld k).
	lda = n
	if transB {
		lda = k
	}
	// Second operand: op(A)ᵀ, k×m. A is stored m×k (ld k) or, transposed, k×m (ld m).
	ldb = k
	if transA {
		ldb = m
	}
	return blasOp(transB), blasOp(transA), n, m, k, max(lda, 1), max(ldb, 1), max(n, 1)
}

// Gemm implements Backend with cublasSgemm (FP32, no TF32).
func (c *cudaBackend) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Buffer, beta float32, cb Buffer) {
	if !prodOK(m, k) || !prodOK(k, n) || !prodOK(m, n) {
		c.argErr("Gemm", "m=%d n=%d k=%d out of range", m, n, k)
		return
	}
	pa, ok1 := c.fbuf("Gemm", "a", a, m*k)
	pb, ok2 := c.fbuf("Gemm", "b", b, k*n)
	pc, ok3 := c.fbuf("Gemm", "c", cb, m*n)
	if !ok1 || !ok2 || !ok3 || m == 0 || n == 0 || !c.enter() {
		return
	}
	defer c.leave()
	ta, tb, cm, cn, ck, lda, ldb, ldc := gemmArgs(transA, transB, m, n, k)
	c.alpha, c.beta = alpha, beta
	r := c.lib.cublasSgemm(c.blas, ta, tb, int32(cm), int32(cn), int32(ck), &c.alpha, pb, int32(lda), pa, int32(ldb), &c.beta, pc, int32(ldc))
	c.fail(checkBLAS(fmt.Sprintf("cublasSgemm_v2(transA=%v transB=%v m=%d n=%d k=%d)", transA, transB, m, n, k), r))
}

// AddRowVector implements Backend.
func (c *cudaBackend) AddRowVector(x, v Buffer, rows, cols int) {
	if !prodOK(rows, cols) {
		c.argErr("AddRowVector", "rows=%d cols=%d out of range", rows, cols)
		return
	}
	px, ok1 := c.fbuf("AddRowVector", "x", x, rows*cols)
	pv, ok2 := c.fbuf("AddRowVector", "v", v, cols)
	if !ok1 || !ok2 || rows*cols == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.launch(kAddRowVector, rows*cols, aPtr(px), aPtr(pv), aInt(rows), aInt(cols))
}

// SumRows implements Backend: dst[c] += Σ_r x[r,c], summed in chunks of rows
// and added atomically (so the order of the float additions varies).
func (c *cudaBackend) SumRows(dst, x Buffer, rows, cols int) {
	if !prodOK(rows, cols) {
		c.argErr("SumRows", "rows=%d cols=%d out of range", rows, cols)
		return
	}
	pd, ok1 := c.fbuf("SumRows", "dst", dst, cols)
	px, ok2 := c.fbuf("SumRows", "x", x, rows*cols)
	if !ok1 || !ok2 || rows*cols == 0 || !c.enter() {
		return
	}
	defer c.leave()
	work := cols * ceilDiv(rows, cudaSumRowsChunk)
	c.launch(kSumRows, work, aPtr(pd), aPtr(px), aInt(rows), aInt(cols), aInt(cudaSumRowsChunk))
}

// ReLU implements Backend.
func (c *cudaBackend) ReLU(y, x Buffer, n int) {
	if !elemsOK(n) {
		c.argErr("ReLU", "n=%d out of range", n)
		return
	}
	py, ok1 := c.fbuf("ReLU", "y", y, n)
	px, ok2 := c.fbuf("ReLU", "x", x, n)
	if !ok1 || !ok2 || n == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.launch(kReLU, n, aPtr(py), aPtr(px), aInt(n))
}

// ReLUBackward implements Backend.
func (c *cudaBackend) ReLUBackward(dx, dy, y Buffer, n int) {
	if !elemsOK(n) {
		c.argErr("ReLUBackward", "n=%d out of range", n)
		return
	}
	pdx, ok1 := c.fbuf("ReLUBackward", "dx", dx, n)
	pdy, ok2 := c.fbuf("ReLUBackward", "dy", dy, n)
	py, ok3 := c.fbuf("ReLUBackward", "y", y, n)
	if !ok1 || !ok2 || !ok3 || n == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.launch(kReLUBackward, n, aPtr(pdx), aPtr(pdy), aPtr(py), aInt(n))
}

// bagArgs checks the buffers of EmbeddingBag and EmbeddingBagBackward and
// returns the kernel arguments: (batchBuf, table) in that order, or (table,
// batchBuf) when tableFirst, then idx, offsets, w, batch, dim, rows, nidx.
// batchBuf (out or gradOut) is batch×dim; table (table or gradTable) has
// rows = Len/dim rows. Entries whose offsets fall outside idx or w, or whose
// indices fall outside the table, are skipped by the kernels rather than
// faulting the device.
func (c *cudaBackend) bagArgs(op string, batchBuf, table Buffer, tableFirst bool, idx, offsets IntBuffer, w Buffer, batch, dim int) ([]karg, bool) {
	if !prodOK(batch, dim) || (batch > 0 && dim <= 0) {
		c.argErr(op, "batch=%d dim=%d out of range", batch, dim)
		return nil, false
	}
	pi, ok := c.ibuf(op, "idx", idx, 0)
	if !ok {
		return nil, false
	}
	po, ok1 := c.ibuf(op, "offsets", offsets, batch+1)
	pw, ok2 := c.fbuf(op, "w", w, 0)
	pb, ok3 := c.fbuf(op, "out/gradOut", batchBuf, batch*dim)
	pt, ok4 := c.fbuf(op, "table/gradTable", table, 0)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, false
	}
	nidx := min(idx.Len(), w.Len()) // entries j ≥ nidx are skipped
	rows := 0
	if dim > 0 {
		rows = min(table.Len()/dim, math.MaxInt32)
	}
	first, second := pb, pt
	if tableFirst {
		first, second = pt, pb
	}
	return []karg{aPtr(first), aPtr(second), aPtr(pi), aPtr(po), aPtr(pw), aInt(batch), aInt(dim), aInt(rows), aInt(min(nidx, math.MaxInt32))}, true
}

// EmbeddingBag implements Backend.
func (c *cudaBackend) EmbeddingBag(out, table Buffer, idx, offsets IntBuffer, w Buffer, batch, dim int) {
	args, ok := c.bagArgs("EmbeddingBag", out, table, false, idx, offsets, w, batch, dim)
	if !ok || batch*dim == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.launch(kEmbeddingBag, batch*dim, args...)
}

// EmbeddingBagBackward implements Backend (float atomics: the order of the
// additions into a shared table row varies).
func (c *cudaBackend) EmbeddingBagBackward(gradTable, gradOut Buffer, idx, offsets IntBuffer, w Buffer, batch, dim int) {
	args, ok := c.bagArgs("EmbeddingBagBackward", gradOut, gradTable, true, idx, offsets, w, batch, dim)
	if !ok || batch*dim == 0 || !c.enter() {
		return
	}
	defer c.leave()
	c.launch(kEmbeddingBagBackward, batch*dim, args...)
}

// AdamW implements Backend; the bias corrections 1−β^step are computed on
// the host in float64, as the CPU backend does.
func (c *cudaBackend) AdamW(p, g, m, v Buffer, n int, lr, beta1, beta2, eps, wd float32, step int) {
	if !elemsOK(n) || step < 1 {
		c.argErr("AdamW", "n=%d step=%d out of range", n, step)
		return
	}
	pp, ok1 := c.fbuf("AdamW", "p", p, n)
	pg, ok2 := c.fbuf("AdamW", "g", g, n)
	pm, ok3 := c.fbuf("AdamW", "m", m, n)
	pv, ok4 := c.fbuf("AdamW", "v", v, n)
	if !ok1 || !ok2 || !ok3 || !ok4 || n == 0 || !c.enter() {
		return
	}
	defer c.leave()
	bc1 := float32(1 - math.Pow(float64(beta1), float64(step)))
	bc2 := float32(1 - math.Pow(float64(beta2), float64(step)))
	c.launch(kAdamW, n, aPtr(pp), aPtr(pg), aPtr(pm), aPtr(pv), aInt(n),
		aFloat(lr), aFloat(beta1), aFloat(beta2), aFloat(eps), aFloat(wd), aFloat(bc1), aFloat(bc2))
}

// Sync implements Backend: it waits for the stream and returns the first
// recorded failure (sticky: a CUDA context that faulted stays unusable).
func (c *cudaBackend) Sync() error {
	if c.closed {
		c.fail(ErrCUDAClosed)
		return c.err
	}
	if c.err == nil && c.enter() {
		c.fail(c.lib.check("cuStreamSynchronize", c.lib.cuStreamSynchronize(c.stream)))
		c.leave()
	}
	return c.err
}

// Close implements Backend: it waits for queued work and releases every
// buffer, the kernels, the cuBLAS handle, the stream and the context. It is
// idempotent; it returns failures of the release itself, not earlier ones.
func (c *cudaBackend) Close() error {
	if c.closed {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var errs []error
	if c.lib.cuCtxSetCurrent(c.ctx) == cudaSuccess {
		// A faulted context fails this too; release anyway.
		if err := c.lib.check("cuStreamSynchronize", c.lib.cuStreamSynchronize(c.stream)); err != nil && c.err == nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.release())
	c.closed = true
	return errors.Join(errs...)
}

var _ Backend = (*cudaBackend)(nil)
