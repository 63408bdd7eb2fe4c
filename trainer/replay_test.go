package trainer

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// replayTrainer is a trainer that is never run (no broker; ClickHouse only
// where a test opens it), with the small model, every sample trained (no
// held-out groups) and cfg changed by mod; reg receives its metrics.
func replayTrainer(t testing.TB, reg *prometheus.Registry, mod func(*Config)) *Trainer {
	t.Helper()
	cfg := Config{Brokers: []string{"unused:9092"}, ClickHouse: "unused:9000", CheckpointDir: t.TempDir(), Listen: "off",
		Model: smallModel(), BatchSize: 8, HeldoutFraction: -1, Name: "replay"}
	if mod != nil {
		mod(&cfg)
	}
	opts := []Option{WithLogger(zerolog.Nop()), WithBackend(backend.NewCPU())}
	if reg != nil {
		opts = append(opts, WithRegisterer(reg))
	}
	tr, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// feed hands samples to tr's step in batches of n, as the loop would (one
// partition, offsets from *off on), never behind.
func feed(t testing.TB, tr *Trainer, samples []*schemas.LabeledSample, n int, off *int64) {
	t.Helper()
	for lo := 0; lo < len(samples); lo += n {
		var batch []sampleMsg
		for _, s := range samples[lo:min(lo+n, len(samples))] {
			batch = append(batch, sampleMsg{part: 0, off: *off, s: s})
			*off++
		}
		if err := tr.trainBatch(context.Background(), batch, false); err != nil {
			t.Fatal(err)
		}
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestReplayWindowIsBoundedAndRecent: the window holds at most its capacity,
// the most recent examples, and a draw is distinct examples of it.
func TestReplayWindowIsBoundedAndRecent(t *testing.T) {
	t.Parallel()
	w := newReplayWindow(5)
	exs := SyntheticExamples(1, 12)
	for i := range exs {
		exs[i].Effect = float64(i) // identifies the example
		w.add(exs[i])
	}
	if w.len() != 5 {
		t.Fatalf("window of 5 after 12 adds holds %d", w.len())
	}
	for _, ex := range SyntheticExamples(2, 1000) { // a long stream does not grow it
		w.add(ex)
	}
	if c := cap(w.buf); w.len() != 5 || c > 10 {
		t.Fatalf("window of 5 after 1012 adds holds %d in a slice of capacity %d", w.len(), c)
	}
	w = newReplayWindow(5)
	for i := range exs {
		w.add(exs[i])
	}
	r := rand.New(rand.NewPCG(1, 1))
	seen := map[float64]int{}
	for range 200 {
		got := w.draw(r, 3, nil)
		ids := map[float64]bool{}
		for _, ex := range got {
			if ex.Effect < 7 {
				t.Fatalf("drew example %v, evicted (the window holds 7..11)", ex.Effect)
			}
			if ids[ex.Effect] {
				t.Fatalf("draw %v repeats example %v", got, ex.Effect)
			}
			ids[ex.Effect] = true
			seen[ex.Effect]++
		}
		if len(got) != 3 {
			t.Fatalf("drew %d, want 3", len(got))
		}
	}
	if len(seen) != 5 {
		t.Fatalf("200 draws reached %d of the 5 examples", len(seen))
	}
	if got := w.draw(r, 9, nil); len(got) != 5 {
		t.Fatalf("a draw of 9 from 5 returned %d, want all 5", len(got))
	}
}

// TestReplaysNeverAdmit: a trainer that replays (8 replayed examples per
// new one, a window smaller than the stream) admits exactly what a trainer
// without replays admits: the same samples_trained, frontier, dedup window,
// trainer_steps rows (each sample id once, duplicates skipped) and
// hf_trainer_samples_trained_total; the replays show only as optimizer
// steps and hf_trainer_replayed_examples_total.
func TestReplaysNeverAdmit(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	samples := genSamples(r, 0, 120)
	for i := 0; i < 15; i++ { // redeliveries
		samples = append(samples, samples[r.IntN(len(samples))])
	}
	run := func(ratio float64) (*Trainer, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		tr := replayTrainer(t, reg, func(c *Config) { c.ReplayRatio, c.ReplayWindow = ratio, 32 })
		var off int64
		feed(t, tr, samples, 7, &off)
		return tr, reg
	}
	with, wreg := run(8)
	without, oreg := run(-1)
	ids := map[string]int{}
	for _, row := range with.rows {
		for _, id := range row.ids {
			ids[id]++
		}
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("sample %s in %d trainer_steps rows", id, n)
		}
	}
	if len(ids) != 120 || with.trained != 120 || without.trained != 120 {
		t.Fatalf("%d distinct ids in rows, samples_trained %d with replays and %d without; want 120", len(ids), with.trained, without.trained)
	}
	if with.step != without.step || len(with.rows) != len(without.rows) || fmt.Sprint(with.offsets) != fmt.Sprint(without.offsets) ||
		!bytes.Equal(with.dedup.ordered(), without.dedup.ordered()) || with.dedup.len() != 120 {
		t.Fatalf("replays changed the admission: steps %d/%d, rows %d/%d, offsets %v/%v", with.step, without.step,
			len(with.rows), len(without.rows), with.offsets, without.offsets)
	}
	for i := range with.rows {
		if with.rows[i].hash != without.rows[i].hash || with.rows[i].samples != without.rows[i].samples {
			t.Fatalf("row %d differs: %d samples %s vs %d %s", i, with.rows[i].samples, with.rows[i].hash, without.rows[i].samples, without.rows[i].hash)
		}
	}
	if a, b := gauge(t, wreg, "hf_trainer_samples_trained_total"), gauge(t, oreg, "hf_trainer_samples_trained_total"); a != 120 || b != 120 {
		t.Fatalf("hf_trainer_samples_trained_total %v with replays, %v without; want 120", a, b)
	}
	replayed, rsteps := gauge(t, wreg, "hf_trainer_replayed_examples_total"), gauge(t, wreg, "hf_trainer_replay_steps_total")
	if replayed != 8*120 {
		t.Fatalf("replayed %v examples, want 8 per admitted sample = 960", replayed)
	}
	if got, want := with.models[0].Steps(), int(with.step)+int(rsteps); got != want || rsteps == 0 {
		t.Fatalf("optimizer steps %d, want %d trainer steps + %v replay steps", got, with.step, rsteps)
	}
	if without.models[0].Steps() != int(without.step) || gauge(t, oreg, "hf_trainer_replayed_examples_total") != 0 {
		t.Fatalf("without replays: %d optimizer steps for %d trainer steps", without.models[0].Steps(), without.step)
	}
	if with.window.len() != 32 || gauge(t, wreg, "hf_trainer_replay_window_examples") != 32 {
		t.Fatalf("replay window holds %d, want its bound 32", with.window.len())
	}
	// Behind the stream, a round is skipped.
	before := with.models[0].Steps()
	batch := []sampleMsg{{part: 0, off: 1000, s: genSamples(r, 500, 1)[0]}}
	if err := with.trainBatch(context.Background(), batch, true); err != nil {
		t.Fatal(err)
	}
	if with.models[0].Steps() != before+1 || with.trained != 121 {
		t.Fatalf("behind: %d optimizer steps after %d, want one (no replays)", with.models[0].Steps(), before)
	}
}

// TestLRScheduleFollowsStepsAcrossRestore: the trainer's models take the
// schedule's rate at every optimizer step (replays included); a checkpoint
// restored through the trainer's own restore (ClickHouse included) goes on
// at the step it stopped at, so the next step equals the uninterrupted
// trainer's next step bit for bit.
func TestLRScheduleFollowsStepsAcrossRestore(t *testing.T) {
	t.Parallel()
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	mod := func(c *Config) {
		c.ClickHouse, c.Database, c.CheckpointDir = ch.Addr, ch.Database, dir
		c.LRSchedule, c.LRWarmup, c.LRDecaySteps, c.LRMinRatio, c.ReplayRatio = ScheduleCosine, 4, 30, 0.05, 2
	}
	a := replayTrainer(t, nil, mod)
	sched := newLRSchedule(&a.cfg)
	if got := a.models[0].LR(); got != sched.at(1) || got >= a.cfg.Model.LR/2 {
		t.Fatalf("first step's rate %v, want the warm-up's %v", got, sched.at(1))
	}
	var off int64
	feed(t, a, genSamples(rand.New(rand.NewPCG(7, 8)), 0, 48), 8, &off)
	n := a.models[0].Steps()
	if n <= int(a.step) {
		t.Fatalf("%d optimizer steps for %d trainer steps: replays took none", n, a.step)
	}
	want := sched.at(n + 1)
	if got := a.models[0].LR(); got != want || want == a.cfg.Model.LR || want == sched.at(1) {
		t.Fatalf("after %d steps the next rate is %v, want the schedule's %v (peak %v)", n, got, want, a.cfg.Model.LR)
	}
	if err := a.checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}

	b := replayTrainer(t, nil, mod)
	if err := b.openClickHouse(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.ch.Close()
	if err := b.restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.models[0].Steps() != n || b.models[0].LR() != want {
		t.Fatalf("restored: %d steps, next rate %v; want %d and %v", b.models[0].Steps(), b.models[0].LR(), n, want)
	}
	if got := metricValue(t, b.metrics.learningRate); got != float64(want) || metricValue(t, b.metrics.optimizerSteps) != float64(n) {
		t.Fatalf("restored: hf_trainer_learning_rate %v, hf_trainer_optimizer_steps %v; want %v and %d", got, metricValue(t, b.metrics.optimizerSteps), want, n)
	}
	next := SyntheticExamples(9, 8)
	for _, tr := range []*Trainer{a, b} {
		if _, err := tr.models[0].TrainStep(next); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := a.models[0].State().Params, b.models[0].State().Params
	for i := range pa {
		for j := range pa[i].P {
			if pa[i].P[j] != pb[i].P[j] {
				t.Fatalf("after restore, the next step differs from the uninterrupted one at %s[%d]: %v vs %v", pa[i].Name, j, pb[i].P[j], pa[i].P[j])
			}
		}
	}
}

func TestLRScheduleShapes(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Model.LR = 1
	inv := newLRSchedule(&c)
	c.LRSchedule = ScheduleCosine
	cos := newLRSchedule(&c)
	c.LRSchedule = ScheduleConstant
	cst := newLRSchedule(&c)
	near := func(a float32, b float64) bool { return math.Abs(float64(a)-b) < 1e-6 }
	for _, tc := range []struct {
		name string
		got  float32
		want float64
	}{
		{"warm-up step 1", inv.at(1), 1.0 / 20}, {"warm-up end", inv.at(20), 1}, {"after warm-up", inv.at(21), 1}, {"inverse-sqrt after D", inv.at(1021), 1 / math.Sqrt2},
		{"inverse-sqrt floor", inv.at(10_000_000), 0.1}, {"cosine half-way", cos.at(521), 0.55}, {"cosine end", cos.at(1021), 0.1},
		{"cosine after the end", cos.at(50_000), 0.1}, {"constant", cst.at(50_000), 1}, {"constant warm-up", cst.at(10), 0.5},
	} {
		if !near(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	c = DefaultConfig()
	c.LRWarmup, c.LRMinRatio = -1, -1
	if s := newLRSchedule(&c); s.at(1) != c.Model.LR || !near(s.at(1<<30), float64(c.Model.LR)/math.Sqrt(1+float64(1<<30-1)/1000)) {
		t.Errorf("no warm-up, no floor: %v at step 1, %v at 2^30", s.at(1), s.at(1<<30))
	}
}

// TestEarlyStopPausesReplaysAndNewDataResumes: when replays on the training
// stream make the held-out loss worse (the held-out set says the opposite
// of the training data), replays pause after --early-stop-patience
// evaluations (metric, counter); new samples still train, one optimizer
// step per batch and no replay; once new samples have refilled the window,
// replays resume. And the state machine resumes when new samples improve
// the held-out loss.
func TestEarlyStopPausesReplaysAndNewDataResumes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// The MLP structure without the within-round term: this tests the
	// replay state machine, which needs a model whose held-out loss new
	// samples only worsen (the additive structure's closed-form base, and
	// the within-round term on the held-out rounds, move with them).
	tr := replayTrainer(t, reg, func(c *Config) {
		c.ReplayRatio, c.ReplayWindow, c.EarlyStopPatience = 4, 64, 3
		c.Model.Structure, c.Model.RoundWeight = StructureMLP, -1
	})
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range genSamples(r, 100_000, 200) { // held out, with the markers' effect reversed
		inv := *s
		inv.Effect = -s.Effect
		inv.Label = LabelNames[2-LabelIndex(s.Label)]
		tr.heldSet.add(&inv)
	}
	var off int64
	next := 0
	batch := func() {
		feed(t, tr, genSamples(r, next, 8), 8, &off)
		next += 8
	}
	for i := 0; !tr.early.paused; i++ {
		if i == 60 {
			t.Fatalf("replays never paused in 60 batches (best %v, %d evaluations without improvement)", tr.early.best, tr.early.bad)
		}
		batch()
	}
	if gauge(t, reg, "hf_trainer_replay_paused") != 1 || gauge(t, reg, "hf_trainer_early_stops_total") != 1 ||
		math.IsNaN(gauge(t, reg, "hf_trainer_heldout_loss")) {
		t.Fatal("paused, but the metrics do not say so")
	}
	// Paused: each batch trains once, nothing is replayed, until 64 new
	// samples (the window's size) have come.
	steps, replayed, trained := tr.models[0].Steps(), gauge(t, reg, "hf_trainer_replayed_examples_total"), tr.trained
	for i := 0; i < 7; i++ {
		batch()
		if !tr.early.paused {
			t.Fatalf("replays resumed after %d new samples, before the window refilled (the held-out loss says the opposite of them)", tr.early.sincePause)
		}
	}
	if got := tr.models[0].Steps() - steps; got != 7 || gauge(t, reg, "hf_trainer_replayed_examples_total") != replayed || tr.trained != trained+56 {
		t.Fatalf("while paused: %d optimizer steps for 7 batches, replayed %v → %v, trained %d → %d",
			got, replayed, gauge(t, reg, "hf_trainer_replayed_examples_total"), trained, tr.trained)
	}
	batch() // the 64th sample since the pause: replays resume
	if tr.early.paused || gauge(t, reg, "hf_trainer_replayed_examples_total") <= replayed || gauge(t, reg, "hf_trainer_replay_paused") != 0 {
		t.Fatal("replays did not resume once new samples refilled the window")
	}

	// The state machine: patience, then a resume by improvement.
	e := newEarlyStop(2)
	for i, loss := range []float64{1, 0.9, 0.95, 0.9} {
		if e.observe(loss) != (i == 3) {
			t.Fatalf("evaluation %d (%v): paused %v", i, loss, e.paused)
		}
	}
	if why := e.admitted(5, 0.9, 100); why != "" || !e.paused {
		t.Fatal("new samples that do not improve the held-out loss resumed replays")
	}
	if why := e.admitted(5, math.NaN(), 100); why != "" || !e.paused {
		t.Fatal("no evaluation resumed replays")
	}
	if why := e.admitted(5, 0.8, 100); why == "" || e.paused || e.best != 0.8 {
		t.Fatalf("new samples that improve the held-out loss did not resume replays (best %v)", e.best)
	}
	if off := newEarlyStop(-1); off.observe(1) || off.observe(2) || off.observe(3) || off.paused {
		t.Fatal("patience off paused")
	}
}

// TestReplaysFitASlowStreamBetter: 400 samples arriving 8 at a time, the
// default replay settings against one pass: lower loss on the samples
// trained and on held-out groups (never trained), same seed, same stream.
func TestReplaysFitASlowStreamBetter(t *testing.T) {
	t.Parallel()
	stream := genSamples(rand.New(rand.NewPCG(21, 22)), 0, 480)
	var heldout []*schemas.LabeledSample
	for _, s := range genSamples(rand.New(rand.NewPCG(23, 24)), 10_000, 240) {
		s.CampaignID = "other" // unseen groups
		heldout = append(heldout, s)
	}
	loss := func(tr *Trainer, ss []*schemas.LabeledSample) float64 {
		exs := make([]Example, len(ss))
		for i, s := range ss {
			exs[i] = Example{Input: Input{Update: s.Update, Query: s.Query, Kind: s.ArtifactKind, Evolver: s.EvolverModel,
				Agent: s.AgentModel, Benchmark: s.Benchmark}, Effect: s.Effect, Label: LabelIndex(s.Label)}
		}
		return tr.models[0].Loss(exs).Total
	}
	run := func(ratio float64) (train, held float64, steps int) {
		tr := replayTrainer(t, nil, func(c *Config) { c.ReplayRatio = ratio })
		for _, s := range heldout {
			tr.heldSet.add(s)
		}
		var off int64
		feed(t, tr, stream[:400], 8, &off)
		t.Logf("ratio %v: paused %v, %d evaluations since the best", ratio, tr.early.paused, tr.early.bad)
		return loss(tr, stream[:400]), loss(tr, heldout), tr.models[0].Steps()
	}
	oneTrain, oneHeld, oneSteps := run(-1)
	repTrain, repHeld, repSteps := run(0) // the default
	t.Logf("one pass: %d optimizer steps, loss %.3f on the samples trained, %.3f held out; default replays: %d steps, %.3f, %.3f",
		oneSteps, oneTrain, oneHeld, repSteps, repTrain, repHeld)
	if repTrain > oneTrain-0.1 || repHeld > oneHeld-0.05 {
		t.Fatalf("replays did not fit the slow stream better: training loss %.3f vs %.3f one pass, held-out %.3f vs %.3f",
			repTrain, oneTrain, repHeld, oneHeld)
	}
}

// TestReplayAndScheduleConfig: defaults, and a validation error per bad
// field that names its flag.
func TestReplayAndScheduleConfig(t *testing.T) {
	t.Parallel()
	d := DefaultConfig()
	if d.ReplayWindow != 5000 || d.ReplayRatio != 4 || d.ReplayBatchSize != 32 || d.EarlyStopPatience != 5 || d.EarlyStopRows != 256 ||
		d.LRSchedule != ScheduleInverseSqrt || d.LRWarmup != 20 || d.LRDecaySteps != 1000 || d.LRMinRatio != 0.1 {
		t.Fatalf("defaults: %+v", d)
	}
	c := Config{Brokers: []string{"b"}, ClickHouse: "c", CheckpointDir: "d", ReplayWindow: -3, ReplayRatio: math.NaN(),
		EarlyStopRows: -1, ReplayBatchSize: -2, LRSchedule: "linear", LRDecaySteps: -5, LRMinRatio: 2}
	c.setDefaults()
	err := c.Validate()
	for _, flag := range []string{"--replay-window", "--replay-ratio", "--replay-batch-size", "--early-stop-rows", "--lr-schedule", "--lr-decay-steps", "--lr-min-ratio"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("validation error does not name %s: %v", flag, err)
		}
	}
}

// TestReplayCreditWaitsForTheStreamToCatchUp: while behind, rounds are
// skipped but their credit is kept; the first round after the trainer has
// caught up spends it (ratio × every sample admitted meanwhile), and the
// credit never exceeds ReplayRatio × ReplayWindow examples however long the
// backlog.
func TestReplayCreditWaitsForTheStreamToCatchUp(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	tr := replayTrainer(t, reg, func(c *Config) { c.ReplayRatio, c.ReplayWindow, c.EarlyStopPatience = 2, 100, -1 })
	r := rand.New(rand.NewPCG(5, 6))
	samples := genSamples(r, 0, 48)
	var off int64
	for lo := 0; lo < 40; lo += 8 { // 5 batches, each with more waiting
		var batch []sampleMsg
		for _, s := range samples[lo : lo+8] {
			batch = append(batch, sampleMsg{part: 0, off: off, s: s})
			off++
		}
		if err := tr.trainBatch(context.Background(), batch, true); err != nil {
			t.Fatal(err)
		}
	}
	if got := gauge(t, reg, "hf_trainer_replayed_examples_total"); got != 0 || tr.models[0].Steps() != 5 {
		t.Fatalf("behind: %v replayed, %d optimizer steps; want none replayed, 5 steps", got, tr.models[0].Steps())
	}
	feed(t, tr, samples[40:], 8, &off) // caught up: 6 batches × 8 × 2 credit
	if got := gauge(t, reg, "hf_trainer_replayed_examples_total"); got != 2*48 {
		t.Fatalf("after catching up: %v replayed, want 2 × 48 = 96", got)
	}
	if tr.trained != 48 {
		t.Fatalf("trained %d samples, want 48 (replays admit nothing)", tr.trained)
	}

	// A long backlog: the credit stops at ratio × window.
	tr2 := replayTrainer(t, nil, func(c *Config) { c.ReplayRatio, c.ReplayWindow, c.EarlyStopPatience = 2, 16, -1 })
	for i, s := range genSamples(r, 100, 64) {
		if err := tr2.trainBatch(context.Background(), []sampleMsg{{part: 0, off: int64(i), s: s}}, true); err != nil {
			t.Fatal(err)
		}
	}
	if tr2.replayCredit != 2*16 {
		t.Fatalf("credit after a backlog of 64: %v, want the cap 2 × 16 = 32", tr2.replayCredit)
	}
}

// Replays draw whole rounds: the candidates of a round come together, so
// the within-round term of the loss sees them.
func TestReplayDrawsWholeRounds(t *testing.T) {
	t.Parallel()
	w := newReplayWindow(30)
	for i := 0; i < 30; i++ {
		w.add(Example{Round: fmt.Sprintf("r%d", i%10), Effect: float64(i)})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 20; trial++ {
		got := drawRounds(w, rng, 9, nil)
		if len(got) != 9 {
			t.Fatalf("drew %d, want 9", len(got))
		}
		per := map[string]int{}
		seen := map[float64]bool{}
		for _, e := range got {
			per[e.Round]++
			if seen[e.Effect] {
				t.Fatalf("example %v drawn twice", e.Effect)
			}
			seen[e.Effect] = true
		}
		for r, n := range per {
			if n != 3 {
				t.Fatalf("round %s: %d of its 3 examples drawn together (%v)", r, n, per)
			}
		}
	}
}
