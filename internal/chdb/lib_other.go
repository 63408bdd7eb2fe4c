//go:build !linux

package chdb

import (
	"errors"
	"unsafe"
)

// library stands in for libchdb.so's functions where chDB is not supported.
type library struct{}

var lib library

var errUnsupported = errors.New("chdb: supported on linux only (the project installs libchdb.so for linux-x64)")

func loadLibrary() (*library, error) { return nil, errUnsupported }

func (*library) connect([]string) (unsafe.Pointer, error) { return nil, errUnsupported }

func (*library) closeConn(unsafe.Pointer) {}

func (*library) query(unsafe.Pointer, string, string) ([]byte, string) {
	return nil, errUnsupported.Error()
}
