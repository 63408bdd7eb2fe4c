package obs

import (
	"net"
	"net/netip"
	"strings"

	"github.com/rs/zerolog"
)

// IsLoopback reports whether addr, a "host:port" or a bare host, can be
// reached from this machine only: an IP address of 127.0.0.0/8 or ::1
// (IPv4-mapped included) or the name "localhost". An empty host (":9092"),
// the unspecified addresses 0.0.0.0 and ::, any other address and any
// other host name (it may resolve to anything) are not loopback. It is
// safe for concurrent use.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}

// WarnUnauthenticated logs a warning on log when a listener that
// authenticates no client (authenticated false) listens on addr and addr
// is not loopback (IsLoopback): anyone who can reach the port can use
// what it serves. listener names it ("broker", "trainer"); risk says what
// such a client can do and how to close it. The line has the fields
// listener, addr and risk, and the message "listener not on loopback and
// without authentication". It returns whether it warned.
func WarnUnauthenticated(log zerolog.Logger, listener, addr string, authenticated bool, risk string) bool {
	if authenticated || IsLoopback(addr) {
		return false
	}
	log.Warn().Str("listener", listener).Str("addr", addr).Str("risk", risk).
		Msg("listener not on loopback and without authentication")
	return true
}
