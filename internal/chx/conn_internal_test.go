package chx

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// A write to a peer that does not read fails after the connection's write
// timeout, or at the user's earlier deadline; a peer that reads gets the
// bytes.
func TestWriteDeadlineConnBoundsWrites(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := newWriteDeadlineConn(a, 50*time.Millisecond)
	if _, err := w.Write([]byte("stuck")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write nobody reads, 50ms timeout: %v, want a deadline error", err)
	}

	w = newWriteDeadlineConn(a, time.Hour)
	if err := w.SetDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("stuck")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write nobody reads, user deadline 50ms, timeout 1h: %v, want a deadline error", err)
	}

	if err := w.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 5)
		n, _ := io.ReadFull(b, buf)
		got <- string(buf[:n])
	}()
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatalf("write to a reader: %v", err)
	}
	if s := <-got; s != "hello" {
		t.Fatalf("reader got %q, want hello", s)
	}
}
