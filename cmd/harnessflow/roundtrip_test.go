package main

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestRoundTripSurvivesBrokerRestart is the definition of done: 10,000
// events of all seven raw types go in through `produce` and come back out of
// `consume` identical, before and after the broker restarts on its data dir.
func TestRoundTripSurvivesBrokerRestart(t *testing.T) {
	t.Parallel()
	const n = 10000
	ctx := prodCtx(t, 3*time.Minute)
	dir := t.TempDir()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "kafka")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	addr := b.Addr()
	if err := b.EnsureAllTopics(ctx); err != nil { // as `harnessflow broker` does at start
		t.Fatal(err)
	}

	evs := producerstest.Mixed(n, "rt")
	lines := prodJSONL(t, evs)
	perTopic := map[string]int{}
	for _, ev := range evs {
		perTopic[schemas.TopicFor(ev.Type())]++
	}
	if len(perTopic) != len(schemas.RawTopics) {
		t.Fatalf("events cover %d topics, want all %d raw topics", len(perTopic), len(schemas.RawTopics))
	}
	want := append([]string(nil), lines...)
	sort.Strings(want)
	in := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	code, _, stderr := prodRunCLI(t, ctx, "", "produce", "--brokers", addr, "--progress", "0", in)
	if code != 0 || !strings.HasSuffix(stderr, "produced "+strconv.Itoa(n)+", rejected 0\n") {
		t.Fatalf("produce: exit %d; stderr:\n%s", code, stderr)
	}

	consumeAll := func(stage string) {
		t.Helper()
		var got []string
		for _, topic := range schemas.RawTopics {
			code, out, stderr := prodRunCLI(t, ctx, "", "consume", "--brokers", addr, "--topic", topic,
				"--from-beginning", "--max", strconv.Itoa(perTopic[topic]), "--idle-timeout", "20s")
			if code != 0 || stderr != "" {
				t.Fatalf("%s: consume %s: exit %d; stderr:\n%s", stage, topic, code, stderr)
			}
			lines := consumeLines(out)
			if len(lines) != perTopic[topic] {
				t.Fatalf("%s: %s gave %d events, want %d", stage, topic, len(lines), perTopic[topic])
			}
			got = append(got, lines...)
		}
		sort.Strings(got)
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", stage, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: events differ; first difference:\n got %s\nwant %s", stage, got[i], want[i])
			}
		}
	}
	consumeAll("before restart")

	b.Close()
	b, err = broker.Start(broker.Config{Listen: addr, DataDir: filepath.Join(dir, "kafka")})
	if err != nil {
		t.Fatalf("restart the broker on %s: %v", addr, err)
	}
	consumeAll("after restart")
}
