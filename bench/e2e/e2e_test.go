package e2e

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/bench/fleet"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestRunSmall runs the whole bench at a tiny size against the real cluster
// (embedded broker, clickhouse-server, the real process/sink/train children)
// and checks what it asserts and records.
func TestRunSmall(t *testing.T) {
	ctx, cancel := testenv.Context(t)
	defer cancel()
	bin, err := fleet.BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var progress testenv.SyncBuffer
	res, err := Run(ctx, Config{Bin: bin, Dir: filepath.Join(dir, "cluster"), Keep: true, Events: 20000,
		LatencyRate: 1000, LatencyDuration: 3 * time.Second, LatencySample: 10, PeerTimeout: 30 * time.Second,
		// Two groups of storm blocks; 2 % malformed: 120 a block, so that the
		// injector hands its writer full batches and a last short one.
		StormBlocks: 8, MalformedPct: 2,
		PhaseTimeout: 3 * time.Minute, Progress: &progress})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		logs, _ := filepath.Glob(filepath.Join(dir, "cluster", "logs", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("%s (tail):\n%s", l, tail(string(b), 3000))
		}
		t.Fatal(err)
	}

	// Every row visible, counts exactly the generated campaign's.
	th := res.Throughput
	if th.Got != th.Expected || th.Expected.Attempts == 0 || th.Expected.Samples == 0 || th.Expected.Rounds == 0 {
		t.Errorf("throughput rows %+v, want %+v (non-zero)", th.Got, th.Expected)
	}
	if th.Expected.raw() != res.Events || res.Events < 18000 {
		t.Errorf("raw rows expected %d, events %d", th.Expected.raw(), res.Events)
	}
	if !(th.ProduceS > 0 && th.ProcessedS > 0 && th.RawVisibleS > 0 && th.VisibleS >= th.RawVisibleS) {
		t.Errorf("throughput timings %+v", th)
	}
	if res.E2EEventsPerS <= 0 || res.ProduceEventsPerS < res.E2EEventsPerS {
		t.Errorf("rates: produce %.0f, e2e %.0f", res.ProduceEventsPerS, res.E2EEventsPerS)
	}
	// The CPU budget: every process measured; CPU time cannot exceed the
	// machine's CPUs over the wall time, so the bound is at least the
	// rate over the same interval (10 ms ticks of slack per process).
	if c := th.CPU; c == nil {
		t.Errorf("throughput run without a cpu budget")
	} else {
		for _, k := range append(append([]string(nil), cpuComponents...), "pipeline") {
			if !(c.CoreS[k] > 0) {
				t.Errorf("cpu core_s[%s] = %v (%s)", k, c.CoreS[k], c)
			}
		}
		if slack := 0.01 * float64(len(cpuComponents)); !(c.Busy > 0 && c.CPUs >= 1 && c.CoreS["pipeline"] <= float64(c.CPUs)*c.WallS+slack &&
			c.BoundEventsPerS >= float64(th.Events)/(c.WallS+slack/float64(c.CPUs))) || c.Note != "" {
			t.Errorf("cpu budget %s", c)
		}
	}
	// Latency.
	l := res.Latency
	if l.Samples == 0 || !(0 < l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max) || l.PollMS != 50 {
		t.Errorf("latency %+v", l)
	}
	// RSS.
	r := res.RSSMB
	for name, v := range map[string]float64{"process_1x": r.Process1x, "process_10x": r.Process10x, "sink_1x": r.Sink1x,
		"sink_10x": r.Sink10x, "train_1x": r.Train1x, "train_10x": r.Train10x,
		"process_backlog": r.ProcessBacklog, "sink_backlog": r.SinkBacklog, "train_backlog": r.TrainBacklog} {
		if v <= 1 {
			t.Errorf("rss %s = %.1f MiB", name, v)
		}
	}
	lh := res.LiveHeapMB
	for name, v := range map[string]float64{"process_1x": lh.Process1x, "process_10x": lh.Process10x, "process_backlog": lh.ProcessBacklog,
		"sink_1x": lh.Sink1x, "sink_10x": lh.Sink10x, "sink_backlog": lh.SinkBacklog,
		"train_1x": lh.Train1x, "train_10x": lh.Train10x, "train_backlog": lh.TrainBacklog} {
		if v <= 0 {
			t.Errorf("live heap %s = %.1f MiB", name, v)
		}
	}
	// Campaigns of other seeds differ a little in size.
	if r.RatePerS != 25000 || r.Events1x == 0 || r.Events10x < 9*r.Events1x || r.Events10x > 11*r.Events1x || r.BacklogNote != "" {
		t.Errorf("rss runs: %d and %d events at %.0f/s (want about 10x the events at the default 25000/s), note %q",
			r.Events1x, r.Events10x, r.RatePerS, r.BacklogNote)
	}
	// Ceilings and ratios.
	if res.Ceilings.KafkaReadEventsPerS <= 0 || res.Ceilings.ClickHouseClientRowsPerS <= 0 || res.Ceilings.ClickHouseClientRows != res.Events {
		t.Errorf("ceilings %+v", res.Ceilings)
	}
	for _, k := range []string{"process_vs_kafka_go_read", "sink_vs_clickhouse_client", "e2e_vs_kafka_go_read", "e2e_vs_clickhouse_client"} {
		if v := res.Ratios[k]; !(v > 0) {
			t.Errorf("ratio %s = %v", k, v)
		}
	}
	// The floor: every mandatory step measured, their sum, and the
	// pipeline's cost as a ratio to it.
	if f := res.Floor; f == nil {
		t.Errorf("no floor measured")
	} else {
		steps := []float64{f.ProduceUS, f.RawReadUS, f.RelayUS, f.DecodeUS, f.InsertClientUS, f.InsertServerUS}
		var sum float64
		for i, v := range steps {
			if !(v > 0) {
				t.Errorf("floor step %d = %v: %+v", i, v, f)
			}
			sum += v
		}
		if d := sum - f.SumUS; d > 1e-9 || d < -1e-9 || f.Events < 18000 || f.Note != "" {
			t.Errorf("floor %+v: sum of the steps %v", f, sum)
		}
		if !(f.PipelineUS > 0) || f.Ratio != div(f.PipelineUS, f.SumUS) {
			t.Errorf("floor %+v: ratio", f)
		}
	}
	if l := res.Latency.CPU; l == nil || !(l.CoreS["pipeline"] > 0) || res.Latency.Incomplete {
		t.Errorf("latency cpu budget %v (incomplete %v)", l, res.Latency.Incomplete)
	}
	// Storm: every malformed message dead-lettered with its reason, in
	// blocks alternating S C C S S C C S, each the clean load's campaign
	// shape; the rates pool the blocks of each kind, overall and per group.
	s := res.Storm
	if s.MalformedSent < 150 || s.DLQRows != s.MalformedSent || !sameCounts(s.DLQByReason, s.SentByReason) ||
		s.SentByReason["malformed"] == 0 || s.SentByReason["unknown_fingerprint"] == 0 {
		t.Errorf("storm %+v", s)
	}
	order := []bool{true, false, false, true, true, false, false, true}
	if len(s.Blocks) != len(order) || len(s.GroupRatios) != 2 {
		t.Fatalf("storm blocks %d, want %d; group ratios %v, want 2", len(s.Blocks), len(order), s.GroupRatios)
	}
	var stormEv, cleanEv, dlq int
	var stormS, cleanS float64
	for i, blk := range s.Blocks {
		ph := blk.Phase
		if i%4 == 0 {
			// A group's ratio pools its own four blocks.
			g := s.Blocks[i : i+4]
			want := (float64(g[0].Phase.Events+g[3].Phase.Events) / (g[0].Phase.VisibleS + g[3].Phase.VisibleS)) /
				(float64(g[1].Phase.Events+g[2].Phase.Events) / (g[1].Phase.VisibleS + g[2].Phase.VisibleS))
			if r := s.GroupRatios[i/4]; math.Abs(r-want) > 1e-9 {
				t.Errorf("group %d ratio %.4f, want %.4f from its blocks", i/4+1, r, want)
			}
		}
		if blk.Malformed != order[i] || ph.Got != ph.Expected || ph.Expected.Attempts == 0 || ph.Expected.Samples == 0 {
			t.Errorf("storm block %d %s: malformed %v, rows %+v, want %+v", i, blk.Name, blk.Malformed, ph.Got, ph.Expected)
		}
		if blk.Malformed {
			stormEv, stormS, dlq = stormEv+ph.Events, stormS+ph.VisibleS, dlq+ph.Got.DLQ
		} else {
			cleanEv, cleanS = cleanEv+ph.Events, cleanS+ph.VisibleS
			if ph.Got.DLQ != 0 {
				t.Errorf("clean block %s has %d dead letters", blk.Name, ph.Got.DLQ)
			}
		}
	}
	if dlq != s.MalformedSent || s.Events != stormEv {
		t.Errorf("storm blocks: %d dead letters of %d sent, %d events of %d", dlq, s.MalformedSent, stormEv, s.Events)
	}
	if s.RateRatio <= 0 || math.Abs(s.E2EEventsPerS-float64(stormEv)/stormS) > 1e-6 || math.Abs(s.CleanPerS-float64(cleanEv)/cleanS) > 1e-6 ||
		math.Abs(s.RateRatio-s.E2EEventsPerS/s.CleanPerS) > 1e-9 {
		t.Errorf("storm rates: storm %.0f, clean %.0f, ratio %.3f (blocks: %d events in %.1fs, %d in %.1fs)",
			s.E2EEventsPerS, s.CleanPerS, s.RateRatio, stormEv, stormS, cleanEv, cleanS)
	}
	// Peer: recorded either way.
	if res.Peer.Status == "" || (res.Peer.Status != "ok" && res.Peer.Reason == "") {
		t.Errorf("peer %+v", res.Peer)
	}
	if res.Peer.Status == "ok" && res.Peer.RowsVisible < res.Peer.Rows {
		t.Errorf("peer ok with %d of %d rows", res.Peer.RowsVisible, res.Peer.Rows)
	}
	// The JSON has every field the issue asks for.
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"e2e_events_per_s", "produce_events_per_s", "latency_ms", "rss_mb", "ceilings", "ratios", "peer",
		"storm", "machine", "date", "command", "goals"} {
		if _, ok := m[k]; !ok {
			t.Errorf("json lacks %q", k)
		}
	}
	for _, k := range []string{"p50", "p95", "p99"} {
		if _, ok := m["latency_ms"].(map[string]any)[k]; !ok {
			t.Errorf("latency_ms lacks %q", k)
		}
	}
	mach := res.Machine
	if mach.Cores < 1 || mach.MemoryGiB <= 0 || mach.Go == "" || mach.ClickHouse == "" || mach.Kernel == "" {
		t.Errorf("machine %+v", mach)
	}
	names := map[string]bool{}
	for _, g := range res.Goals {
		names[g.Name] = true
	}
	for _, n := range []string{"e2e_events_per_s", "latency_p99_ms_at_10k_per_s", "rss_10x_over_1x_max", "storm_rate_ratio", "storm_dlq_complete",
		"pipeline_cpu_over_floor", "latency_p99_ms_at_10k_per_s_issue41", "e2e_vs_clickhouse_client"} {
		if !names[n] {
			t.Errorf("goal %s missing: %+v", n, res.Goals)
		}
	}
	if len(res.Goals) != len(names) || len(names) != 8 {
		t.Errorf("goals %+v", res.Goals)
	}
	if !strings.Contains(progress.String(), "throughput:") {
		t.Errorf("no progress lines")
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
