package stack

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestEmbeddedBrokerBeyondLoopbackIsWarned: up's embedded broker has no
// SASL, so listening beyond loopback logs a warning at start naming it
// and its address; on loopback it logs none.
func TestEmbeddedBrokerBeyondLoopbackIsWarned(t *testing.T) {
	for listen, want := range map[string]bool{"0.0.0.0:0": true, "127.0.0.1:0": false} {
		var buf bytes.Buffer
		s, err := New(Config{DataDir: t.TempDir(), BrokerListen: listen}, WithLogger(zerolog.New(&buf)))
		if err != nil {
			t.Fatal(err)
		}
		brokers, _, stop, err := s.startKafka(Endpoints{})
		if err != nil {
			t.Fatalf("%s: %v", listen, err)
		}
		stop()
		warned := strings.Contains(buf.String(), `"level":"warn","listener":"embedded broker","addr":"`+brokers[0]+`"`) &&
			strings.Contains(buf.String(), "not on loopback and without authentication")
		if warned != want {
			t.Errorf("broker on %s (%s): warned %v, want %v; log:\n%s", listen, brokers[0], warned, want, buf.String())
		}
	}
}
