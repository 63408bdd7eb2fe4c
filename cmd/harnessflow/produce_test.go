package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// prodRunCLI runs the harnessflow root command with args and stdin and returns
// the exit status main would use, stdout and stderr (with the error main
// prints).
func prodRunCLI(t *testing.T, ctx context.Context, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(ctx)
	code := 0
	if err != nil {
		code = 2
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
			err = ee.err
		}
		if err != nil { // what main prints
			fmt.Fprintln(&stderr, "harnessflow:", err)
		}
	}
	return code, stdout.String(), stderr.String()
}

func prodCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// prodJSONL returns the JSON forms of evs, one per line.
func prodJSONL(t *testing.T, evs []schemas.Event) []string {
	t.Helper()
	lines := make([]string, len(evs))
	for i, ev := range evs {
		b, err := schemas.MarshalJSON(ev)
		if err != nil {
			t.Fatal(err)
		}
		lines[i] = string(b)
	}
	return lines
}

// prodTopicEvents decodes every event stored on the raw topics.
func prodTopicEvents(t *testing.T, ctx context.Context, addr string, topics ...string) []schemas.Event {
	t.Helper()
	if len(topics) == 0 {
		topics = schemas.RawTopics
	}
	var out []schemas.Event
	for _, topic := range topics {
		msgs, err := producerstest.ReadTopic(ctx, addr, topic)
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		for _, m := range msgs {
			ev, err := schemas.Decode(m.Value)
			if err != nil {
				t.Fatalf("decode %s@%d: %v", topic, m.Offset, err)
			}
			out = append(out, ev)
		}
	}
	return out
}

func TestProduceReportsEachBadLineAndExits1(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	good := prodJSONL(t, producerstest.Mixed(3, "p"))
	badEnum := producerstest.TaskAttempt(2, "p")
	badEnum.Status = "exploded"
	be, err := schemas.MarshalJSON(badEnum)
	if err != nil {
		t.Fatal(err)
	}
	badLines := map[int]string{
		3: `{"type": "task_attempt", "cell_id": `,
		5: `{"type": "no_such_event", "cell_id": "c"}`,
		7: string(be),
	}
	lines := []string{good[0], "", badLines[3], good[1], badLines[5], "   ", badLines[7], good[2]}
	var want []string
	for n, l := range badLines {
		_, err := schemas.ParseJSON([]byte(l), schemas.DefaultLimits())
		if err == nil {
			t.Fatalf("line %d is meant to be invalid: %s", n, l)
		}
		want = append(want, fmt.Sprintf("line %d: %v", n, err))
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := prodRunCLI(t, ctx, "", "produce", "--brokers", b.Addr(), "--progress", "0", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	var got []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "line ") {
			got = append(got, l)
		}
	}
	for _, w := range want {
		if !strings.Contains(stderr, w+"\n") {
			t.Errorf("stderr lacks %q", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d line reports, want %d:\n%s", len(got), len(want), stderr)
	}
	if !strings.HasSuffix(stderr, "produced 3, rejected 3\n") {
		t.Errorf("stderr does not end with the summary:\n%s", stderr)
	}
	if evs := prodTopicEvents(t, ctx, b.Addr()); len(evs) != 3 {
		t.Fatalf("%d events on the broker, want 3", len(evs))
	}
}

func TestProduceAllGoodFromStdinFillsEnvelope(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	evs := producerstest.Mixed(14, "")
	for _, ev := range evs {
		ev.Header().Source = ""
	}
	in := strings.Join(prodJSONL(t, evs), "\n") // no final newline
	code, _, stderr := prodRunCLI(t, ctx, in, "produce", "--brokers", b.Addr(), "--project", "acme", "--progress", "0", "-")
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	if !strings.HasSuffix(stderr, "produced 14, rejected 0\n") {
		t.Errorf("stderr:\n%s", stderr)
	}
	got := prodTopicEvents(t, ctx, b.Addr())
	if len(got) != len(evs) {
		t.Fatalf("%d events on the broker, want %d", len(got), len(evs))
	}
	for _, ev := range got {
		if h := ev.Header(); h.Project != "acme" || h.Source != "produce" {
			t.Fatalf("envelope %+v: want project acme and source produce filled in", h)
		}
	}
}

func TestProduceUnreachableBrokerExits2(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx := prodCtx(t, 30*time.Second)
	line := prodJSONL(t, producerstest.Mixed(1, "p"))[0]
	code, _, stderr := prodRunCLI(t, ctx, line+"\n", "produce", "--brokers", addr, "--connect-timeout", "300ms")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	// Usage errors exit 2 too.
	if code, _, _ := prodRunCLI(t, ctx, "", "produce", "a.jsonl", "b.jsonl"); code != 2 {
		t.Fatalf("two files: exit %d, want 2", code)
	}
}
