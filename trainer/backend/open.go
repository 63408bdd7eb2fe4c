package backend

import (
	"errors"
	"fmt"
	"os"
)

// NVIDIAPresent reports whether this machine has an NVIDIA GPU driver at all
// (/dev/nvidia0 or /proc/driver/nvidia). The GPU tests skip without one and
// fail with one when the CUDA backend does not open: a broken GPU setup must
// not pass silently.
func NVIDIAPresent() bool {
	for _, p := range []string{"/dev/nvidia0", "/proc/driver/nvidia"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// OpenCUDA opens the CUDA backend. cuda.go's init sets it in every build
// (the driver libraries are loaded at run time, not linked); it returns an
// error when no usable GPU or driver library is present. It stays nil only
// in a program that leaves cuda.go out.
var OpenCUDA func() (Backend, error)

// ErrUnknownDevice is returned by Open for a device other than auto, cpu, cuda.
var ErrUnknownDevice = errors.New("unknown device: want auto, cpu or cuda")

// ErrNoCUDA is returned by Open("cuda") when no CUDA implementation is built in.
var ErrNoCUDA = errors.New("cuda backend not available in this build")

// Open returns the backend for device ("auto", "cpu" or "cuda"; "" means
// "auto") and a sentence saying which it chose and why. "auto" picks CUDA when
// OpenCUDA is set and succeeds, and the CPU otherwise; "cuda" fails rather than
// falling back.
func Open(device string) (Backend, string, error) {
	switch device {
	case "cpu":
		return NewCPU(), "cpu (requested)", nil
	case "cuda":
		if OpenCUDA == nil {
			return nil, "", ErrNoCUDA
		}
		b, err := OpenCUDA()
		if err != nil {
			return nil, "", fmt.Errorf("open cuda: %w", err)
		}
		return b, b.Name() + " (requested)", nil
	case "", "auto":
		if OpenCUDA == nil {
			return NewCPU(), "cpu (auto: no cuda backend in this build)", nil
		}
		b, err := OpenCUDA()
		if err != nil {
			return NewCPU(), fmt.Sprintf("cpu (auto: cuda unusable: %v)", err), nil
		}
		return b, b.Name() + " (auto: usable GPU found)", nil
	default:
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownDevice, device)
	}
}
