package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// produceTo writes samples, in order, to one partition of hf.samples (part
// < 0: the partition of each sample's key).
func produceTo(t *testing.T, addr string, part int, samples []*schemas.LabeledSample) {
	t.Helper()
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{addr}, Topic: schemas.TopicSamples})
	if part >= 0 {
		w.Balancer = kafka.BalancerFunc(func(kafka.Message, ...int) int { return part })
	}
	defer w.Close()
	msgs := make([]kafka.Message, 0, len(samples))
	for _, s := range samples {
		b, err := schemas.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(s.PartitionKey()), Value: b})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// commitGroup commits offsets of hf.samples for group as a simple (generation
// -1) commit, as a trainer's commit after a checkpoint leaves them.
func commitGroup(t *testing.T, addr, group string, offsets map[int]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{}}
	for p, o := range offsets {
		req.Topics[schemas.TopicSamples] = append(req.Topics[schemas.TopicSamples], kafka.OffsetCommit{Partition: p, Offset: o})
	}
	res, err := (&kafka.Client{Addr: kafka.TCP(addr)}).OffsetCommit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range res.Topics {
		for _, p := range ps {
			if p.Error != nil {
				t.Fatalf("commit partition %d: %v", p.Partition, p.Error)
			}
		}
	}
}

func sampleIDs(ss ...[]*schemas.LabeledSample) []string {
	var out []string
	for _, s := range ss {
		for _, x := range s {
			out = append(out, x.SampleID)
		}
	}
	sort.Strings(out)
	return out
}

// resumeConfig is a small, fast trainer on addr and ch with every sample
// trained (no held-out slice) and no checkpoint before the stop.
func resumeConfig(addr string, ch *testenv.CH, name, dir string) Config {
	return Config{
		Brokers: []string{addr}, ClickHouse: ch.Addr, Database: ch.Database, Name: name, Group: name,
		CheckpointDir: dir, CheckpointEvery: 1000, CheckpointInterval: time.Hour,
		BatchSize: 8, BatchAge: 20 * time.Millisecond, Device: "cpu", Listen: "off", HeldoutFraction: -1,
		Model: smallModel(), RowFlushInterval: 10 * time.Millisecond, SessionTimeout: time.Second,
	}
}

type runningTrainer struct {
	tr     *Trainer
	cancel context.CancelFunc
	// done is closed when Run has returned err.
	done chan struct{}
	err  error
	logs *testenv.SyncBuffer
}

func startTrainer(t *testing.T, cfg Config, opts ...Option) *runningTrainer {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	tr, err := New(cfg, append([]Option{WithLogger(zerolog.New(logs)), WithBackend(backend.NewCPU())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt := &runningTrainer{tr: tr, cancel: cancel, done: make(chan struct{}), logs: logs}
	go func() {
		defer close(rt.done)
		rt.err = tr.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-rt.done
		if t.Failed() {
			t.Logf("trainer %s log tail:\n%s", cfg.Name, tail(logs.String(), 4000))
		}
	})
	return rt
}

// waitTrained waits until every id in want is in the trainer's trainer_steps
// rows; Run returning first fails the test.
func (rt *runningTrainer) waitTrained(t *testing.T, ch *testenv.CH, want []string) {
	t.Helper()
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("%d samples trained", len(want)), func() (bool, string) {
		select {
		case <-rt.done:
			t.Fatalf("Run returned while samples were still to train: %v", rt.err)
		default:
		}
		got := map[string]bool{}
		for _, id := range trainedIDs(t, ch, rt.tr.cfg.Name) {
			got[id] = true
		}
		n := 0
		for _, id := range want {
			if got[id] {
				n++
			}
		}
		return n == len(want), fmt.Sprintf("%d of %d", n, len(want))
	})
}

// stop cancels Run and wants it to return nil.
func (rt *runningTrainer) stop(t *testing.T) {
	t.Helper()
	rt.cancel()
	select {
	case <-rt.done:
		if rt.err != nil {
			t.Fatalf("Run after the stop: %v, want nil", rt.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after the stop")
	}
}

func latest(t *testing.T, dir string) *Checkpoint {
	t.Helper()
	ck, _, err := (&CheckpointStore{dir: dir, keep: 3, log: zerolog.Nop()}).LoadLatest()
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

func sortedTrained(t *testing.T, ch *testenv.CH, name string) []string {
	got := trainedIDs(t, ch, name)
	sort.Strings(got)
	return got
}

// TestRestoreReadsUnlistedPartitionFromStart: the newest checkpoint k is
// corrupt, so the trainer restores k-1, which does not list partition 1; the
// group's offset of partition 1 is where checkpoint k left it (50). Samples
// 0-49 of partition 1 are not in k-1's weights, so the restored lineage must
// read partition 1 from its first offset; it used to start at the group's 50
// and never train them.
func TestRestoreReadsUnlistedPartitionFromStart(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	cfg := resumeConfig(addr, ch, "fallback", dir)
	r := rand.New(rand.NewPCG(31, 32))
	all := genSamples(r, 0, 110)
	p0, p1 := all[:30], all[30:]
	produceTo(t, addr, 0, p0)
	produceTo(t, addr, 1, p1)

	store, err := NewCheckpointStore(dir, 3, WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(backend.NewCPU(), smallModel())
	if err != nil {
		t.Fatal(err)
	}
	st := m.State()
	// k-1: partition 0 trained, partition 1 not yet read.
	if _, err := store.Save(&Checkpoint{Index: 1, ModelVersion: "fallback-v1", Step: 4, SamplesTrained: 30, Topic: schemas.TopicSamples,
		Offsets: map[int32]int64{0: 30}, Recent: sampleIDs(p0), Models: []ModelState{st}}); err != nil {
		t.Fatal(err)
	}
	// k: samples 0-49 of partition 1 trained too; its commit moved the
	// group's offset; then the file got truncated.
	if _, err := store.Save(&Checkpoint{Index: 2, ModelVersion: "fallback-v2", Step: 11, SamplesTrained: 80, Topic: schemas.TopicSamples,
		Offsets: map[int32]int64{0: 30, 1: 50}, Recent: sampleIDs(p0, p1[:50]), Models: []ModelState{st}}); err != nil {
		t.Fatal(err)
	}
	commitGroup(t, addr, cfg.Group, map[int]int64{0: 30, 1: 50})
	newest := filepath.Join(dir, FileName(2))
	fi, err := os.Stat(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(newest, fi.Size()/2); err != nil {
		t.Fatal(err)
	}

	rt := startTrainer(t, cfg)
	// Partition 1's tail trains either way; by then its head (read first,
	// in offset order) has trained too if it was read at all.
	rt.waitTrained(t, ch, sampleIDs(p1[50:]))
	rt.stop(t)
	if !strings.Contains(rt.logs.String(), "fell back to an older checkpoint") {
		t.Fatal("the trainer did not fall back from the corrupt checkpoint")
	}
	if got, want := sortedTrained(t, ch, cfg.Name), sampleIDs(p1); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored lineage trained %d samples, want all %d of partition 1 once (0-49 were not in checkpoint k-1): got %v", len(got), len(want), got)
	}
	ck := latest(t, dir)
	if ck.Offsets[0] != 30 || ck.Offsets[1] != 80 || ck.SamplesTrained != 30+80 {
		t.Fatalf("final checkpoint offsets %v, samples trained %d; want {0:30 1:80}, 110", ck.Offsets, ck.SamplesTrained)
	}
}

// TestColdStartResumesAtGroupOffsets: with no checkpoint the trainer starts at
// the group's committed offsets (the cold-start semantics), and records where
// it started as its frontier, so that a restore from its checkpoint does not
// read a partition it started past from the first offset, even when nothing
// of that partition was consumed before the checkpoint.
func TestColdStartResumesAtGroupOffsets(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	cfg := resumeConfig(addr, ch, "cold", dir)
	r := rand.New(rand.NewPCG(41, 42))
	all := genSamples(r, 0, 135)
	p0, p1, p2, p2more := all[:30], all[30:110], all[110:130], all[130:]
	produceTo(t, addr, 0, p0)
	produceTo(t, addr, 1, p1)
	produceTo(t, addr, 2, p2)
	commitGroup(t, addr, cfg.Group, map[int]int64{1: 50, 2: 20})

	rt := startTrainer(t, cfg)
	rt.waitTrained(t, ch, sampleIDs(p0, p1[50:]))
	rt.stop(t)
	if got, want := sortedTrained(t, ch, cfg.Name), sampleIDs(p0, p1[50:]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("cold start trained %v, want partition 0 and partition 1 from the group's offset 50: %v", got, want)
	}
	if ck := latest(t, dir); ck.Offsets[0] != 30 || ck.Offsets[1] != 80 || ck.Offsets[2] != 20 {
		t.Fatalf("checkpoint offsets %v, want {0:30 1:80 2:20} (2: where the cold start began)", ck.Offsets)
	}

	// The restart restores that checkpoint and reads partition 2 from 20.
	produceTo(t, addr, 2, p2more)
	rt = startTrainer(t, cfg)
	rt.waitTrained(t, ch, sampleIDs(p2more))
	rt.stop(t)
	if got, want := sortedTrained(t, ch, cfg.Name), sampleIDs(p0, p1[50:], p2more); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the restore the lineage trained %v, want %v (partition 2 from 20)", got, want)
	}
}

// stallingCH stalls the first PrepareBatch after it is armed until its
// context ends, as a ClickHouse too slow to answer before a SIGTERM does.
type stallingCH struct {
	driver.Conn
	armed   atomic.Bool
	stalled chan struct{}
}

func (c *stallingCH) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	if c.armed.CompareAndSwap(true, false) {
		close(c.stalled)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.Conn.PrepareBatch(ctx, query, opts...)
}

// TestStopDuringRowFlushIsClean: a stop while the regular row flush waits on
// ClickHouse is a clean stop: Run flushes the rows with its drain context,
// writes the final checkpoint and returns nil. It used to return "write N
// trainer_steps rows: context canceled" without a checkpoint.
func TestStopDuringRowFlushIsClean(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	cfg := resumeConfig(addr, ch, "flushstop", dir)
	produceTo(t, addr, 0, genSamples(rand.New(rand.NewPCG(51, 52)), 0, 40))
	sc := &stallingCH{stalled: make(chan struct{})}
	sc.armed.Store(true)
	rt := startTrainer(t, cfg, withClickHouse(func(c driver.Conn) driver.Conn { sc.Conn = c; return sc }))
	select {
	case <-sc.stalled:
	case <-rt.done:
		t.Fatalf("Run returned before its first row flush: %v", rt.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the trainer never flushed rows")
	}
	if _, err := os.Stat(filepath.Join(dir, FileName(1))); !os.IsNotExist(err) {
		t.Fatalf("a checkpoint exists before the stop (%v): the test would not show the final one", err)
	}
	rt.stop(t)
	ck := latest(t, dir)
	if ck.Step < 1 || ck.SamplesTrained < 1 {
		t.Fatalf("final checkpoint at step %d with %d samples: the steps before the stop are lost", ck.Step, ck.SamplesTrained)
	}
	if got := trainedIDs(t, ch, cfg.Name); int64(len(got)) != ck.SamplesTrained {
		t.Fatalf("trainer_steps hold %d sample ids, the final checkpoint %d samples", len(got), ck.SamplesTrained)
	}
}

// counter returns the value of the trainer's counter name (with label reason
// when not empty), as /metrics shows it.
func counter(t *testing.T, tr *Trainer, name, reason string) float64 {
	t.Helper()
	mfs, err := tr.served.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			r := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					r = l.GetValue()
				}
			}
			if r == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s{reason=%q}", name, reason)
	return 0
}

// TestInvalidSampleIsSkipped: samples with a NaN, an infinite and an
// out-of-range effect between good ones are skipped (consumed, counted,
// logged at error level with where they are), and the trainer keeps training
// the rest. One of them used to fail its step with ErrDiverged, again after
// every restart.
func TestInvalidSampleIsSkipped(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	cfg := resumeConfig(addr, ch, "invalid", dir)
	samples := genSamples(rand.New(rand.NewPCG(61, 62)), 0, 40)
	badAt := map[int64]float64{10: math.NaN(), 21: math.Inf(-1), 30: 1.5}
	var good []*schemas.LabeledSample
	for i, s := range samples {
		if e, ok := badAt[int64(i)]; ok {
			s.Effect = e
			continue
		}
		good = append(good, s)
	}
	produceTo(t, addr, 0, samples)
	rt := startTrainer(t, cfg)
	rt.waitTrained(t, ch, sampleIDs(good))
	rt.stop(t)
	if got, want := sortedTrained(t, ch, cfg.Name), sampleIDs(good); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("trained %v, want exactly the good samples %v", got, want)
	}
	if ck := latest(t, dir); ck.Offsets[0] != 40 || ck.SamplesTrained != int64(len(good)) {
		t.Fatalf("final checkpoint offsets %v, %d trained; want {0:40} (the bad ones consumed), %d", ck.Offsets, ck.SamplesTrained, len(good))
	}
	if n := counter(t, rt.tr, "hf_trainer_invalid_samples_total", schemas.CodeOutOfRange); n != 3 {
		t.Fatalf("hf_trainer_invalid_samples_total{reason=out_of_range} = %v, want 3", n)
	}
	if n := counter(t, rt.tr, "hf_trainer_bad_samples_total", ""); n != 3 {
		t.Fatalf("hf_trainer_bad_samples_total = %v, want 3", n)
	}
	logged := map[int64]bool{}
	for _, line := range strings.Split(rt.logs.String(), "\n") {
		var e struct {
			Level     string `json:"level"`
			Reason    string `json:"reason"`
			Topic     string `json:"topic"`
			Partition *int32 `json:"partition"`
			Offset    *int64 `json:"offset"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Level != "error" {
			continue
		}
		if e.Reason != schemas.CodeOutOfRange || e.Topic != schemas.TopicSamples || e.Partition == nil || *e.Partition != 0 || e.Offset == nil {
			t.Fatalf("error log line without reason, topic, partition and offset: %s", line)
		}
		logged[*e.Offset] = true
	}
	if len(logged) != len(badAt) || !logged[10] || !logged[21] || !logged[30] {
		t.Fatalf("error logs name offsets %v, want 10, 21 and 30", logged)
	}
	// And each is dead-lettered in hf.dlq, with its coordinates and reason.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := producerstest.ReadTopic(ctx, addr, schemas.TopicDLQ)
	if err != nil {
		t.Fatal(err)
	}
	dead := map[int64]bool{}
	for _, m := range msgs {
		ev, err := schemas.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		r := ev.(*schemas.Rejected)
		if r.SourceTopic != schemas.TopicSamples || r.Partition != 0 || r.Stage != schemas.StageSyntax || r.ReasonCode != schemas.CodeOutOfRange || len(r.Payload) == 0 {
			t.Fatalf("dead letter %+v: want hf.samples/0, stage syntax, out_of_range, with the payload", r)
		}
		if name := schemas.Entity(samples[r.Offset]); !strings.HasPrefix(r.Message, name+": ") {
			t.Fatalf("dead letter message %q does not name the sample (%s)", r.Message, name)
		}
		dead[r.Offset] = true
	}
	if len(msgs) != len(badAt) || !dead[10] || !dead[21] || !dead[30] {
		t.Fatalf("%d dead letters at offsets %v, want 3 at 10, 21 and 30", len(msgs), dead)
	}
}

func TestCheckSample(t *testing.T) {
	t.Parallel()
	good := func() *schemas.LabeledSample {
		return &schemas.LabeledSample{SampleID: "s", Label: "positive", Effect: 0.3, HarnessVersionIndex: 2}
	}
	for _, c := range []struct {
		name  string
		edit  func(*schemas.LabeledSample)
		field string
		code  string
	}{
		{"good", func(*schemas.LabeledSample) {}, "", ""},
		{"effect -1", func(s *schemas.LabeledSample) { s.Effect = -1 }, "", ""},
		{"effect 1", func(s *schemas.LabeledSample) { s.Effect = 1 }, "", ""},
		{"effect NaN", func(s *schemas.LabeledSample) { s.Effect = math.NaN() }, "effect", schemas.CodeOutOfRange},
		{"effect +Inf", func(s *schemas.LabeledSample) { s.Effect = math.Inf(1) }, "effect", schemas.CodeOutOfRange},
		{"effect -Inf", func(s *schemas.LabeledSample) { s.Effect = math.Inf(-1) }, "effect", schemas.CodeOutOfRange},
		{"effect above 1", func(s *schemas.LabeledSample) { s.Effect = 1.0001 }, "effect", schemas.CodeOutOfRange},
		{"effect below -1", func(s *schemas.LabeledSample) { s.Effect = -3 }, "effect", schemas.CodeOutOfRange},
		{"unknown label", func(s *schemas.LabeledSample) { s.Label = "great" }, "label", schemas.CodeBadEnum},
		{"empty label", func(s *schemas.LabeledSample) { s.Label = "" }, "label", schemas.CodeBadEnum},
		{"no sample id", func(s *schemas.LabeledSample) { s.SampleID = "" }, "sample_id", schemas.CodeMissingField},
		{"negative version index", func(s *schemas.LabeledSample) { s.HarnessVersionIndex = -1 }, "harness_version_index", schemas.CodeOutOfRange},
	} {
		s := good()
		c.edit(s)
		fe := checkSample(s)
		switch {
		case c.code == "" && fe != nil:
			t.Errorf("%s: rejected: %v", c.name, fe)
		case c.code != "" && fe == nil:
			t.Errorf("%s: accepted, want %s on %s", c.name, c.code, c.field)
		case c.code != "" && (fe.Code != c.code || fe.Field != c.field):
			t.Errorf("%s: %s on %s (%v), want %s on %s", c.name, fe.Code, fe.Field, fe, c.code, c.field)
		}
	}
}

// TestTrainerWaitsOutClickHouseGoingAwayWhileMigrating: ClickHouse closes
// the trainer's connection in the middle of its start-up migrations, twice
// (a proxy cuts them, as a server restarting under a starting service
// does). The trainer used to exit on it; it connects again, migrates and
// trains every sample.
func TestTrainerWaitsOutClickHouseGoingAwayWhileMigrating(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	ch := testenv.ClickHouse(t)
	proxy := testenv.StartCutProxy(t, ch.Addr, 2, 4<<10)
	cfg := resumeConfig(addr, ch, "cut", t.TempDir())
	cfg.ClickHouse = proxy.Addr
	samples := genSamples(rand.New(rand.NewPCG(7, 8)), 0, 24)
	produceTo(t, addr, -1, samples)
	rt := startTrainer(t, cfg)
	rt.waitTrained(t, ch, sampleIDs(samples))
	if proxy.Cut() != 2 {
		t.Fatalf("%d connections cut, want 2: the test did not interrupt the migrations", proxy.Cut())
	}
}
