package kafkatopics

import (
	"strconv"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestMaxMessageBytes: every topic's max.message.bytes is MaxMessageBytes,
// which holds an event at the schemas' event cap with room for the record
// batch around it.
func TestMaxMessageBytes(t *testing.T) {
	if maxMessage != strconv.Itoa(MaxMessageBytes) {
		t.Fatalf("maxMessage %s, MaxMessageBytes %d", maxMessage, MaxMessageBytes)
	}
	if ev := schemas.DefaultLimits().Event; MaxMessageBytes < ev+1<<20 {
		t.Fatalf("max.message.bytes %d leaves under 1 MiB above the %d-byte event cap", MaxMessageBytes, ev)
	}
	for _, tp := range All() {
		if tp.Configs["max.message.bytes"] != maxMessage {
			t.Errorf("%s: max.message.bytes %q, want %s", tp.Name, tp.Configs["max.message.bytes"], maxMessage)
		}
	}
}
