package obs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestLogFormat: json writes one JSON object a line; console writes
// zerolog's human-readable line (level, message, fields); auto picks JSON
// when stderr is not a terminal (as under go test); a bad name is refused.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	defer func() { _ = SetLogFormat("auto") }()
	line := func() string {
		var b bytes.Buffer
		l := newLogger(&b, "sink")
		l.Info().Int("rows", 3).Msg("flushed")
		return b.String()
	}
	if err := SetLogFormat("json"); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line()), &m); err != nil || m["component"] != "sink" || m["message"] != "flushed" {
		t.Fatalf("json: %v %v", m, err)
	}
	if err := SetLogFormat("console"); err != nil {
		t.Fatal(err)
	}
	if s := line(); json.Valid([]byte(s)) || !strings.Contains(s, "INF") || !strings.Contains(s, "flushed") || !strings.Contains(s, "rows=3") {
		t.Fatalf("console: %q", s)
	}
	if err := SetLogFormat("auto"); err != nil {
		t.Fatal(err)
	}
	if s := line(); !json.Valid([]byte(strings.TrimSpace(s))) {
		t.Fatalf("auto with stderr not a terminal: %q, want JSON", s)
	}
	if err := SetLogFormat("yaml"); err == nil || !strings.Contains(err.Error(), LogFormats) {
		t.Fatalf("yaml: %v", err)
	}
}
