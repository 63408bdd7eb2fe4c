package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// TestClusterLifecycle starts the co-located cluster with real children,
// restarts the broker on its data dir and ClickHouse on its ports, and sees
// every child come up and stop cleanly.
func TestClusterLifecycle(t *testing.T) {
	ctx, cancel := testenv.Context(t)
	defer cancel()
	bin, err := BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir(), Bin: bin, Env: []string{"HF_LOG_LEVEL=warn"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: c.Brokers()})
	if err := w.WriteMessages(ctx, kafka.Message{Topic: "hf.dlq", Key: []byte("k"), Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := c.RestartBroker(); err != nil {
		t.Fatal(err)
	}
	// What was written before the restart is still there.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.Brokers(), Topic: "hf.dlq", Partition: firstPartitionWith(t, ctx, c), MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil || string(m.Value) != "before" {
		t.Fatalf("after broker restart: %q, %v", m.Value, err)
	}
	if err := c.StopClickHouse(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartClickHouse(ctx); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := c.Conn().QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = '"+c.Database()+"'").Scan(&n); err != nil || n == 0 {
		t.Fatalf("tables after ClickHouse restart: %d, %v", n, err)
	}
	// Every child serves /healthz once it runs against the restarted broker
	// and ClickHouse (the trainer only after its start-up), and its live
	// heap is sampled from its /metrics.
	for _, p := range c.Children() {
		waitHealthy(t, ctx, p)
	}
	for _, p := range c.Children() {
		testenv.WaitFor(t, 30*time.Second, p.Name+"'s live heap sampled from "+p.MetricsURL, func() (bool, string) {
			return p.PeakLiveHeapMB() > 0, "no go_gc_heap_live_bytes sample yet (one a second)"
		})
	}
	for _, p := range c.Children() {
		if !p.Running() {
			t.Fatalf("%s exited: %v (log %s)", p.Name, p.ExitErr(), p.LogPath)
		}
		if p.PeakRSSMB() <= 0 {
			t.Fatalf("%s: no peak RSS", p.Name)
		}
	}
	if err := c.Close(); err != nil {
		for _, p := range c.Children() {
			if b, rerr := os.ReadFile(p.LogPath); rerr == nil {
				t.Logf("%s log tail:\n%s", p.Name, tailLines(string(b), 15))
			}
		}
		t.Fatalf("a child did not stop cleanly: %v", err)
	}
}

func firstPartitionWith(t *testing.T, ctx context.Context, c *Cluster) int {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(c.Brokers()...), Timeout: 10 * time.Second}
	var reqs []kafka.OffsetRequest
	for p := 0; p < 6; p++ {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	// A broker just restarted may answer a partition with an error for a
	// moment (a retriable one, as it would to any client): ask again for a
	// while before concluding that the message is gone.
	part := -1
	testenv.WaitFor(t, 20*time.Second, "a partition of hf.dlq holding the message written before the restart", func() (bool, string) {
		res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{"hf.dlq": reqs}})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, p := range res.Topics["hf.dlq"] {
			if p.LastOffset > 0 {
				part = p.Partition
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("partition %d: last offset %d, error %v", p.Partition, p.LastOffset, p.Error))
		}
		return false, strings.Join(seen, "; ")
	})
	return part
}

// tailLines returns the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitHealthy waits (a minute at most) until the /readyz of p's --listen
// address answers 200 (started and healthy).
func waitHealthy(t *testing.T, ctx context.Context, p *Proc) {
	t.Helper()
	var addr string
	for i, a := range p.Args {
		if a == "--listen" && i+1 < len(p.Args) {
			addr = p.Args[i+1]
		}
	}
	if addr == "" {
		t.Fatalf("%s has no --listen address", p.Name)
	}
	testenv.WaitFor(t, time.Minute, p.Name+"'s /readyz answering 200", func() (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		state := "running"
		if !p.Running() {
			state = fmt.Sprintf("exited: %v", p.ExitErr())
		}
		last := err
		if err == nil {
			last = errors.New(resp.Status)
		}
		tail := ""
		if b, err := os.ReadFile(p.LogPath); err == nil {
			tail = tailLines(string(b), 20)
		}
		return false, fmt.Sprintf("%v; %s %s; log %s ends:\n%s", last, p.Name, state, p.LogPath, tail)
	})
}
