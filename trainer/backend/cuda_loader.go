package backend

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"
)

// This file loads the CUDA driver API (libcuda) and cuBLAS at run time with
// purego (cuda_dl_linux.go): no cgo, so the binary builds and runs everywhere
// and needs the libraries only on machines that use --device cuda.

// cuResult is a CUresult (driver API) or cublasStatus_t (cuBLAS) value.
type cuResult int32

// Driver API constants used here (cuda.h).
const (
	cudaSuccess              cuResult = 0
	cudaErrorNoDevice        cuResult = 100
	cuStreamNonBlocking      uint32   = 1  // CU_STREAM_NON_BLOCKING
	cuAttrMultiprocessorCnt  int32    = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	cuJitInfoLogBuffer       int32    = 3  // CU_JIT_INFO_LOG_BUFFER
	cuJitInfoLogBufferSize   int32    = 4  // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
	cuJitErrorLogBuffer      int32    = 5  // CU_JIT_ERROR_LOG_BUFFER
	cuJitErrorLogBufferSize  int32    = 6  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	cublasOpN                int32    = 0  // CUBLAS_OP_N
	cublasOpT                int32    = 1  // CUBLAS_OP_T
	cublasDefaultMath        int32    = 0  // CUBLAS_DEFAULT_MATH: no TF32, plain FP32 Sgemm
	cudaJitLogBytes                   = 16 << 10
	cudaLibEnvCUBLAS                  = "HF_CUBLAS_LIB"
	cudaDriverLibraryName             = "libcuda.so.1"
	cudaDriverLibraryNameAlt          = "libcuda.so"
	cudaToolkitDefaultRoot            = "/usr/local/cuda"
	cudaToolkitLibDir                 = "lib64"
)

// cudaLib holds the resolved driver and cuBLAS entry points. Handles are
// uintptr (CUcontext, CUmodule, CUfunction, CUstream, cublasHandle_t), device
// pointers uint64 (CUdeviceptr), sizes uint64 (size_t).
type cudaLib struct {
	cuInit                 func(flags uint32) cuResult
	cuDeviceGetCount       func(n *int32) cuResult
	cuDeviceGet            func(dev *int32, ordinal int32) cuResult
	cuDeviceGetName        func(name *byte, n int32, dev int32) cuResult
	cuDeviceGetAttribute   func(v *int32, attr int32, dev int32) cuResult
	cuDevicePrimaryCtxRet  func(ctx *uintptr, dev int32) cuResult
	cuDevicePrimaryCtxRel  func(dev int32) cuResult
	cuCtxSetCurrent        func(ctx uintptr) cuResult
	cuStreamCreate         func(s *uintptr, flags uint32) cuResult
	cuStreamDestroy        func(s uintptr) cuResult
	cuStreamSynchronize    func(s uintptr) cuResult
	cuMemAlloc             func(p *uint64, bytes uint64) cuResult
	cuMemFree              func(p uint64) cuResult
	cuMemsetD32Async       func(p uint64, v uint32, n uint64, s uintptr) cuResult
	cuMemcpyHtoDAsync      func(dst uint64, src unsafe.Pointer, bytes uint64, s uintptr) cuResult
	cuMemcpyDtoHAsync      func(dst unsafe.Pointer, src uint64, bytes uint64, s uintptr) cuResult
	cuModuleLoadDataEx     func(mod *uintptr, image *byte, nopt uint32, opts *int32, vals *uintptr) cuResult
	cuModuleUnload         func(mod uintptr) cuResult
	cuModuleGetFunction    func(fn *uintptr, mod uintptr, name string) cuResult
	cuLaunchKernel         func(fn uintptr, gx, gy, gz, bx, by, bz, shared uint32, s uintptr, params *unsafe.Pointer, extra *unsafe.Pointer) cuResult
	cuGetErrorName         func(code cuResult, s **byte) cuResult
	cuGetErrorString       func(code cuResult, s **byte) cuResult
	cublasCreate           func(h *uintptr) cuResult
	cublasDestroy          func(h uintptr) cuResult
	cublasSetStream        func(h uintptr, s uintptr) cuResult
	cublasSetMathMode      func(h uintptr, mode int32) cuResult // optional (nil when absent)
	cublasSgemm            func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a uint64, lda int32, b uint64, ldb int32, beta *float32, c uint64, ldc int32) cuResult
	driverPath, cublasPath string
}

var (
	cudaLibOnce sync.Once
	cudaLibVal  *cudaLib
	cudaLibErr  error
)

// loadCUDA opens libcuda and libcublas once per process and resolves every
// entry point the backend uses. A missing library is reported with
// ErrNoCUDADriver or ErrNoCUBLAS; a missing symbol (a driver too old) names it.
func loadCUDA() (*cudaLib, error) {
	cudaLibOnce.Do(func() { cudaLibVal, cudaLibErr = loadCUDALibs() })
	return cudaLibVal, cudaLibErr
}

func loadCUDALibs() (*cudaLib, error) {
	l := &cudaLib{}
	drv, drvPath, err := dlopenFirst([]string{cudaDriverLibraryName, cudaDriverLibraryNameAlt})
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", ErrNoCUDADriver, err)
	}
	l.driverPath = drvPath
	syms := []struct {
		fn    any
		names []string
	}{
		{&l.cuInit, []string{"cuInit"}},
		{&l.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&l.cuDeviceGet, []string{"cuDeviceGet"}},
		{&l.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&l.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&l.cuDevicePrimaryCtxRet, []string{"cuDevicePrimaryCtxRetain"}},
		{&l.cuDevicePrimaryCtxRel, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&l.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&l.cuStreamCreate, []string{"cuStreamCreate"}},
		{&l.cuStreamDestroy, []string{"cuStreamDestroy_v2", "cuStreamDestroy"}},
		{&l.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&l.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&l.cuMemFree, []string{"cuMemFree_v2"}},
		{&l.cuMemsetD32Async, []string{"cuMemsetD32Async"}},
		{&l.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&l.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&l.cuModuleLoadDataEx, []string{"cuModuleLoadDataEx"}},
		{&l.cuModuleUnload, []string{"cuModuleUnload"}},
		{&l.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&l.cuLaunchKernel, []string{"cuLaunchKernel"}},
		{&l.cuGetErrorName, []string{"cuGetErrorName"}},
		{&l.cuGetErrorString, []string{"cuGetErrorString"}},
	}
	for _, s := range syms {
		if err := bindFirst(drv, s.fn, s.names...); err != nil {
			return nil, fmt.Errorf("%s: %w (the NVIDIA driver is too old?)", drvPath, err)
		}
	}

	blas, blasPath, err := dlopenFirst(cublasCandidates())
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", ErrNoCUBLAS, err)
	}
	l.cublasPath = blasPath
	blasSyms := []struct {
		fn    any
		names []string
	}{
		{&l.cublasCreate, []string{"cublasCreate_v2"}},
		{&l.cublasDestroy, []string{"cublasDestroy_v2"}},
		{&l.cublasSetStream, []string{"cublasSetStream_v2"}},
		{&l.cublasSgemm, []string{"cublasSgemm_v2"}},
	}
	for _, s := range blasSyms {
		if err := bindFirst(blas, s.fn, s.names...); err != nil {
			return nil, fmt.Errorf("%s: %w", blasPath, err)
		}
	}
	if bindFirst(blas, &l.cublasSetMathMode, "cublasSetMathMode") != nil {
		l.cublasSetMathMode = nil
	}
	return l, nil
}

// cublasCandidates lists where cuBLAS is looked for, in order: $HF_CUBLAS_LIB,
// the loader's search path (sonames 12, 11, then unversioned), then
// $CUDA_HOME, $CUDA_PATH and the toolkit's conventional root.
func cublasCandidates() []string {
	var c []string
	if p := os.Getenv(cudaLibEnvCUBLAS); p != "" {
		c = append(c, p)
	}
	names := []string{"libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	c = append(c, names...)
	for _, root := range []string{os.Getenv("CUDA_HOME"), os.Getenv("CUDA_PATH"), cudaToolkitDefaultRoot} {
		if root == "" {
			continue
		}
		for _, n := range names[:2] {
			c = append(c, filepath.Join(root, cudaToolkitLibDir, n))
		}
	}
	return c
}

// check turns a driver CUresult into nil or a *CUDAError naming call.
func (l *cudaLib) check(call string, r cuResult) error {
	if r == cudaSuccess {
		return nil
	}
	e := &CUDAError{Call: call, Code: int(r), Name: fmt.Sprintf("CUresult %d", int(r))}
	var p *byte
	if l.cuGetErrorName != nil && l.cuGetErrorName(r, &p) == cudaSuccess && p != nil {
		e.Name = goString(p)
	}
	p = nil
	if l.cuGetErrorString != nil && l.cuGetErrorString(r, &p) == cudaSuccess && p != nil {
		e.Msg = goString(p)
	}
	return e
}

// checkBLAS turns a cublasStatus_t into nil or a *CUDAError naming call.
func checkBLAS(call string, r cuResult) error {
	if r == cudaSuccess {
		return nil
	}
	return &CUDAError{Call: call, Code: int(r), Name: cublasStatusName(r)}
}

func cublasStatusName(r cuResult) string {
	switch r {
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case 11:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case 16:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	default:
		return fmt.Sprintf("cublasStatus %d", int(r))
	}
}

// goString copies a NUL-terminated C string owned by the library.
func goString(p *byte) string {
	var b []byte
	for q := p; *q != 0; q = (*byte)(unsafe.Add(unsafe.Pointer(q), 1)) {
		b = append(b, *q)
	}
	return string(b)
}

// cString returns the text of a NUL-terminated C buffer written into buf.
func cString(buf []byte) string {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return strings.TrimSpace(string(buf))
}
