package obs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:9092":         true,
		"127.1.2.3:80":           true,
		"[::1]:8090":             true,
		"::1":                    true,
		"[::ffff:127.0.0.1]:80":  true,
		"localhost:8080":         true,
		"LocalHost.:8080":        true,
		"127.0.0.1":              true,
		":9092":                  false,
		":0":                     false,
		"0.0.0.0:9092":           false,
		"0.0.0.0":                false,
		"[::]:9092":              false,
		"10.0.0.5:9092":          false,
		"192.168.1.2:8090":       false,
		"[fe80::1%eth0]:8090":    false,
		"broker.example.com:909": false,
		"localhost.evil.com:80":  false,
		"":                       false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestWarnUnauthenticatedLogsAWarning: a listener beyond loopback without
// authentication is a zerolog warning naming it and its address; on
// loopback, or with authentication, nothing is logged.
func TestWarnUnauthenticatedLogsAWarning(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := zerolog.New(&buf).With().Str("component", "broker").Logger()
	if !WarnUnauthenticated(log, "broker", "0.0.0.0:9092", false, "anyone who reaches it reads every topic") {
		t.Fatal("no warning for 0.0.0.0 without authentication")
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	if line["level"] != "warn" || line["listener"] != "broker" || line["addr"] != "0.0.0.0:9092" ||
		!strings.Contains(line["message"].(string), "not on loopback and without authentication") || line["risk"] == "" {
		t.Fatalf("log line %s: want a warning naming the broker, its address and the risk", buf.String())
	}
	buf.Reset()
	for _, c := range []struct {
		addr string
		auth bool
	}{{"127.0.0.1:9092", false}, {"[::1]:9092", false}, {"0.0.0.0:9092", true}, {":8090", true}} {
		if WarnUnauthenticated(log, "broker", c.addr, c.auth, "x") || buf.Len() != 0 {
			t.Fatalf("%s (authenticated %v): warned %q", c.addr, c.auth, buf.String())
		}
	}
}
