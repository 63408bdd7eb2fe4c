package stack

import (
	"net"
	"testing"
)

// bindAddr keeps the previous run's port when it is free, and otherwise
// answers with a port that is bound already (nothing can take it before
// the component serves on it).
func TestBindAddrPrefersThePreviousPort(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	prev := probe.Addr().String()
	probe.Close()
	ln, err := bindAddr("127.0.0.1:0", prev)
	if err != nil {
		t.Fatal(err)
	}
	if ln.Addr().String() != prev {
		t.Fatalf("bound %s, want the previous %s", ln.Addr(), prev)
	}
	// The previous port is taken now (by ln): another bind falls back.
	ln2, err := bindAddr("127.0.0.1:0", prev)
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if ln2.Addr().String() == prev {
		t.Fatalf("bound the taken port %s twice", prev)
	}
	ln.Close()
	if _, err := net.Listen("tcp", ln2.Addr().String()); err == nil {
		t.Fatalf("%s is free while bindAddr's listener is open", ln2.Addr())
	}
}
