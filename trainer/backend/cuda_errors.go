package backend

import (
	"errors"
	"fmt"
)

// ErrNoCUDADriver is returned by NewCUDA (and OpenCUDA) when the NVIDIA driver
// library cannot be loaded.
var ErrNoCUDADriver = errors.New("no CUDA driver (libcuda.so.1) found: install the NVIDIA driver or use --device cpu")

// ErrNoCUBLAS is returned by NewCUDA when no cuBLAS library can be loaded.
var ErrNoCUBLAS = errors.New("no cuBLAS (libcublas.so.12 or .so.11) found: install the CUDA toolkit's cuBLAS, set HF_CUBLAS_LIB to its path, or use --device cpu")

// ErrNoCUDADevice is returned by NewCUDA when the driver loads but reports no
// usable device (or fewer devices than the ordinal asked for).
var ErrNoCUDADevice = errors.New("no CUDA device found: check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --device cpu")

// ErrKernelLoad is returned by NewCUDA when the embedded PTX does not load;
// the error text carries the JIT compiler's log.
var ErrKernelLoad = errors.New("load CUDA kernels")

// ErrCUDAClosed is recorded (and returned by Sync) when a closed CUDA backend
// is used.
var ErrCUDAClosed = errors.New("cuda backend is closed")

// ErrCUDAArg is recorded (and returned by Sync) when an operation is given a
// buffer of another backend, a freed buffer, or sizes that do not fit its
// buffers; the operation is not run.
var ErrCUDAArg = errors.New("invalid cuda operation")

// CUDAError is a failed CUDA driver or cuBLAS call.
type CUDAError struct {
	// Call is the library function, e.g. "cuLaunchKernel(adamw)".
	Call string
	// Code is the CUresult or cublasStatus_t value.
	Code int
	// Name is the code's symbolic name, e.g. "CUDA_ERROR_OUT_OF_MEMORY".
	Name string
	// Msg is the driver's description, when it has one.
	Msg string
}

// Error implements error.
func (e *CUDAError) Error() string {
	if e.Msg != "" && e.Msg != e.Name {
		return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
	}
	return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
}
