//go:build linux

package chdb

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"
)

// library holds libchdb.so's C functions, bound once by loadLibrary.
type library struct {
	setSignalHandlersEnabled func(enabled int32)
	chdbConnect              func(argc int32, argv **byte) unsafe.Pointer
	chdbCloseConn            func(conn unsafe.Pointer)
	chdbQueryN               func(conn unsafe.Pointer, query *byte, queryLen uintptr, format *byte, formatLen uintptr) unsafe.Pointer
	resultBuffer             func(res unsafe.Pointer) unsafe.Pointer
	resultLength             func(res unsafe.Pointer) uintptr
	resultError              func(res unsafe.Pointer) string
	destroyResult            func(res unsafe.Pointer)
}

var (
	lib     library
	libOnce sync.Once
	libErr  error
)

// loadLibrary dlopens libchdb.so and binds its functions, once per process.
func loadLibrary() (*library, error) {
	libOnce.Do(func() {
		path, err := LibraryPath()
		if err != nil {
			libErr = err
			return
		}
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			libErr = fmt.Errorf("chdb: load %s: %w", path, err)
			return
		}
		for _, f := range []struct {
			fn   any
			name string
		}{
			{&lib.setSignalHandlersEnabled, "chdb_set_signal_handlers_enabled"},
			{&lib.chdbConnect, "chdb_connect"},
			{&lib.chdbCloseConn, "chdb_close_conn"},
			{&lib.chdbQueryN, "chdb_query_n"},
			{&lib.resultBuffer, "chdb_result_buffer"},
			{&lib.resultLength, "chdb_result_length"},
			{&lib.resultError, "chdb_result_error"},
			{&lib.destroyResult, "chdb_destroy_query_result"},
		} {
			sym, err := purego.Dlsym(h, f.name)
			if err != nil {
				libErr = fmt.Errorf("chdb: %s lacks %s (not chDB %s?): %w", path, f.name, LibraryVersion, err)
				return
			}
			purego.RegisterFunc(f.fn, sym)
		}
	})
	if libErr != nil {
		return nil, libErr
	}
	return &lib, nil
}

// connect opens a chDB connection with clickhouse-local style arguments and
// returns its chdb_connection pointer. chDB's fault handlers are turned off
// and the Go runtime's handlers of those signals are put back afterwards.
func (l *library) connect(args []string) (unsafe.Pointer, error) {
	argv := make([]*byte, len(args)+1)
	for i, a := range args {
		b := append([]byte(a), 0)
		argv[i] = &b[0]
	}
	var conn unsafe.Pointer
	err := keepSignalHandlers(func() {
		l.setSignalHandlersEnabled(0)
		conn = l.chdbConnect(int32(len(args)), &argv[0])
	})
	if err != nil {
		if conn != nil {
			l.chdbCloseConn(conn)
		}
		return nil, err
	}
	if conn == nil || *(*unsafe.Pointer)(conn) == nil {
		return nil, fmt.Errorf("chdb: connect %q failed (chDB logs the reason on stderr)", args[1:])
	}
	return conn, nil
}

func (l *library) closeConn(conn unsafe.Pointer) { l.chdbCloseConn(conn) }

// query runs one query and returns its output, or chDB's error message.
func (l *library) query(conn unsafe.Pointer, query, format string) (out []byte, errMsg string) {
	// chdb_query_n takes lengths, so the Go strings go as they are, without
	// a NUL-terminated copy.
	var empty [1]byte
	q, f := unsafe.StringData(query), unsafe.StringData(format)
	if q == nil {
		q = &empty[0]
	}
	if f == nil {
		f = &empty[0]
	}
	res := l.chdbQueryN(*(*unsafe.Pointer)(conn), q, uintptr(len(query)), f, uintptr(len(format)))
	if res == nil {
		return nil, "chdb_query_n returned no result"
	}
	defer l.destroyResult(res)
	if msg := l.resultError(res); msg != "" {
		return nil, msg
	}
	n := l.resultLength(res)
	out = []byte{}
	if n > 0 {
		if buf := l.resultBuffer(res); buf != nil {
			out = append(out, unsafe.Slice((*byte)(buf), n)...)
		}
	}
	return out, ""
}

// faultSignals are the signals whose handlers chDB resets to SIG_DFL (or
// replaces with its own) and that the Go runtime needs: SIGSEGV and SIGBUS
// turn nil dereferences into panics.
var faultSignals = []syscall.Signal{
	syscall.SIGABRT, syscall.SIGSEGV, syscall.SIGILL, syscall.SIGBUS,
	syscall.SIGSYS, syscall.SIGFPE, syscall.SIGTSTP, syscall.SIGTRAP,
}

// kernelSigaction is the kernel's struct sigaction on linux (handler, flags,
// restorer, mask), with room to spare.
type kernelSigaction [8]uint64

// sigaction reads (old != nil) and/or sets (act != nil) a signal's action
// with the raw system call, bypassing the C library and the Go runtime.
func sigaction(sig syscall.Signal, act, old *kernelSigaction) error {
	const sigsetSize = 8
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), sigsetSize, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// keepSignalHandlers runs f and then restores the actions faultSignals had
// before it.
func keepSignalHandlers(f func()) error {
	saved := make([]kernelSigaction, len(faultSignals))
	for i, sig := range faultSignals {
		if err := sigaction(sig, nil, &saved[i]); err != nil {
			return fmt.Errorf("chdb: read the action of %v: %w", sig, err)
		}
	}
	f()
	for i, sig := range faultSignals {
		if err := sigaction(sig, &saved[i], nil); err != nil {
			return fmt.Errorf("chdb: restore the action of %v: %w", sig, err)
		}
	}
	return nil
}
