package trainer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// setHash is the evaluation set's name computed here, independently: the
// sha256 of its sample ids, sorted and joined by '\n'.
func setHash(rows []*schemas.LabeledSample) string {
	ids := make([]string, len(rows))
	for i, s := range rows {
		ids[i] = s.SampleID
	}
	sort.Strings(ids)
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return hex.EncodeToString(sum[:])
}

func idsOf(rows []*schemas.LabeledSample) []string {
	out := make([]string, len(rows))
	for i, s := range rows {
		out[i] = s.SampleID
	}
	return out
}

// splitSamples splits genSamples' stream into its training and held-out
// samples at fraction (campaign+seed groups).
func splitSamples(n int, fraction float64) (train, held []*schemas.LabeledSample) {
	for _, s := range genSamples(rand.New(rand.NewPCG(31, 32)), 0, n) {
		if isHeldOutSample(s, fraction) {
			held = append(held, s)
		} else {
			train = append(train, s)
		}
	}
	return train, held
}

// TestEvalEpochRule: the first held-out sample begins epoch 1; while the
// set is smaller than the window an epoch ends once as many held-out
// samples as it holds have come (it doubles), and once it is full after
// --eval-epoch-samples; each new set is the ring as it then is, named by
// the hash of its sorted ids, and a set, once frozen, does not move with
// the ring. A ring filled directly (benchmarks) freezes its set when one is
// first needed.
func TestEvalEpochRule(t *testing.T) {
	t.Parallel()
	c := Config{HeldoutWindow: 500}
	c.setDefaults()
	if d := DefaultConfig(); d.EvalEpochSamples != 2000 || c.EvalEpochSamples != 500 {
		t.Fatalf("--eval-epoch-samples defaults to %d, and to %d with --heldout-window 500; want --heldout-window's", d.EvalEpochSamples, c.EvalEpochSamples)
	}
	_, held := splitSamples(480, 0.25)
	for _, tc := range []struct {
		epochSamples int
		// wantSizes are the sets' sizes at the epochs that begin, with
		// wantAfter the held-out samples that had come when each began.
		wantSizes, wantAfter []int
	}{
		{0, []int{1, 2, 4, 8, 10, 10}, []int{1, 2, 4, 8, 16, 26}},
		{4, []int{1, 2, 4, 8, 10, 10, 10, 10, 10, 10}, []int{1, 2, 4, 8, 12, 16, 20, 24, 28, 32}},
	} {
		tr := replayTrainer(t, nil, func(c *Config) { c.HeldoutWindow, c.EvalEpochSamples = 10, tc.epochSamples })
		if tr.evalRows() != nil || tr.evalSet.epoch != 0 {
			t.Fatal("an evaluation set without held-out samples")
		}
		var sizes, after []int
		for i, s := range held[:35] {
			before := tr.evalSet
			tr.noteHeldOut(s)
			if tr.evalSet.epoch == before.epoch {
				if !reflect.DeepEqual(idsOf(tr.evalSet.rows), idsOf(before.rows)) || tr.evalSet.sha256 != before.sha256 {
					t.Fatal("the set changed within an epoch")
				}
				continue
			}
			if tr.evalSet.epoch != before.epoch+1 || tr.evalSet.sha256 != setHash(tr.evalSet.rows) ||
				!reflect.DeepEqual(idsOf(tr.evalSet.rows), idsOf(tr.heldSet.snapshot())) || tr.evalSet.since != 0 {
				t.Fatalf("epoch %d → %d: %d rows, sha %s (want %s), since %d", before.epoch, tr.evalSet.epoch, len(tr.evalSet.rows),
					tr.evalSet.sha256, setHash(tr.evalSet.rows), tr.evalSet.since)
			}
			sizes, after = append(sizes, len(tr.evalSet.rows)), append(after, i+1)
		}
		if !reflect.DeepEqual(sizes, tc.wantSizes) || !reflect.DeepEqual(after, tc.wantAfter) {
			t.Errorf("--eval-epoch-samples %d: sets of %v rows after %v held-out samples, want %v after %v",
				tc.epochSamples, sizes, after, tc.wantSizes, tc.wantAfter)
		}
	}
	tr := replayTrainer(t, nil, nil)
	for _, s := range held[:5] {
		tr.heldSet.add(s)
	}
	if rows := tr.evalRows(); tr.evalSet.epoch != 1 || !reflect.DeepEqual(idsOf(rows), idsOf(held[:5])) {
		t.Fatalf("a ring filled directly: epoch %d, rows %v", tr.evalSet.epoch, idsOf(rows))
	}
}

// TestEvalSetFixedWithinEpochAndKeptAcrossRestart: checkpoints of one
// evaluation epoch are evaluated on the same rows under the same hash
// (while the held-out ring moves on), the next epoch on new rows under a
// new hash, and critic_evals and critic_eval_diffs rows carry the hash and
// the epoch. A new trainer restored from the last checkpoint has the same
// set, hash and epoch, held-out ring, training window, replay window and
// early-stopping state; it evaluates the restored checkpoint again on the
// same rows with the same predictions (the same verdict and rows); and fed
// the same samples it stays paused, counts and ends the epoch exactly as
// the uninterrupted trainer does, measuring the best loss again on the new
// rows.
func TestEvalSetFixedWithinEpochAndKeptAcrossRestart(t *testing.T) {
	t.Parallel()
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	mod := func(c *Config) {
		c.ClickHouse, c.Database, c.CheckpointDir, c.Name = ch.Addr, ch.Database, dir, "evalset"
		c.HeldoutFraction, c.HeldoutWindow, c.EvalTrainWindow, c.ReplayWindow = 0.25, 16, 40, 24
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jobs := make(chan *CheckpointEval, 8)
	evaluator := func(_ context.Context, in *CheckpointEval) (*EvalResult, error) {
		jobs <- in
		// A verdict that rests on the rows and the predictions: the model's
		// RMSE against the median's.
		var effs []float64
		for _, s := range in.Heldout {
			effs = append(effs, s.Effect)
		}
		sort.Float64s(effs)
		med := effs[len(effs)/2]
		var mse, base float64
		for i, s := range in.Heldout {
			mse += (in.Model[i].Mean - s.Effect) * (in.Model[i].Mean - s.Effect)
			base += (med - s.Effect) * (med - s.Effect)
		}
		rmse, brmse := math.Sqrt(mse/float64(len(effs))), math.Sqrt(base/float64(len(effs)))
		verdict := VerdictNoSignal
		if rmse < brmse {
			verdict = VerdictBeats
		}
		return &EvalResult{Verdict: verdict, HeldoutRows: len(in.Heldout), HeldoutGroups: 2,
			Metrics: []EvalMetric{{Predictor: "model", Metric: EvalRMSE, Value: rmse, Low: rmse, High: rmse},
				{Predictor: "median", Metric: EvalRMSE, Value: brmse, Low: brmse, High: brmse}},
			Comparisons: []EvalComparison{{Metric: EvalRMSE, Baseline: "median", Diff: rmse - brmse, Low: rmse - brmse, High: rmse - brmse, Verdict: verdict}}}, nil
	}
	next := func() *CheckpointEval {
		t.Helper()
		select {
		case in := <-jobs:
			return in
		case <-time.After(time.Minute):
			t.Fatal("no evaluation")
			return nil
		}
	}
	a := replayTrainer(t, nil, mod)
	a.evaluator = evaluator // as WithCheckpointEvaluator gives it
	if err := a.openClickHouse(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.ch.Close()
	stopA := a.startEvals(ctx)

	train, held := splitSamples(480, 0.25)
	if len(held) < 40 || len(train) < 200 {
		t.Fatalf("fixture: %d held out, %d to train", len(held), len(train))
	}
	var off int64
	checkpoint := func(tr *Trainer) *CheckpointEval {
		t.Helper()
		if err := tr.checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
		return next()
	}
	// 10 held-out samples among training ones (a training sample first:
	// the first group is trained on if it is held out): sets of 1, 2, 4
	// and 8 rows, the 4th epoch's 2 samples short of its end.
	feed(t, a, append(append([]*schemas.LabeledSample{}, train[:40]...), held[:10]...), 8, &off)
	e1 := checkpoint(a)
	if e1.EvalEpoch != 4 || !reflect.DeepEqual(idsOf(e1.Heldout), idsOf(held[:8])) || e1.EvalSetSHA256 != setHash(e1.Heldout) {
		t.Fatalf("first checkpoint: epoch %d, rows %v, sha %s (want %s)", e1.EvalEpoch, idsOf(e1.Heldout), e1.EvalSetSHA256, setHash(e1.Heldout))
	}
	// Fewer held-out samples than end the epoch: the ring moves, the set
	// does not.
	feed(t, a, append(append([]*schemas.LabeledSample{}, held[10:15]...), train[40:56]...), 8, &off)
	e2 := checkpoint(a)
	if e2.EvalEpoch != e1.EvalEpoch || e1.EvalSetSHA256 != e2.EvalSetSHA256 || !reflect.DeepEqual(idsOf(e1.Heldout), idsOf(e2.Heldout)) ||
		reflect.DeepEqual(idsOf(a.heldSet.snapshot()), idsOf(e1.Heldout)) {
		t.Fatalf("consecutive checkpoints of one epoch: epochs %d, %d; sha %s, %s; rows %v, %v (the ring %v)",
			e1.EvalEpoch, e2.EvalEpoch, e1.EvalSetSHA256, e2.EvalSetSHA256, idsOf(e1.Heldout), idsOf(e2.Heldout), idsOf(a.heldSet.snapshot()))
	}
	// The 8th held-out sample since: the next epoch, on the ring's 16.
	feed(t, a, append(append([]*schemas.LabeledSample{}, held[15:16]...), train[56:64]...), 8, &off)
	e3 := checkpoint(a)
	if e3.EvalEpoch != 5 || e3.EvalSetSHA256 == e1.EvalSetSHA256 || e3.EvalSetSHA256 != setHash(e3.Heldout) ||
		!reflect.DeepEqual(idsOf(e3.Heldout), idsOf(held[:16])) {
		t.Fatalf("after the epoch: epoch %d, sha %s (the previous %s), rows %v", e3.EvalEpoch, e3.EvalSetSHA256, e1.EvalSetSHA256, idsOf(e3.Heldout))
	}
	// Held-out samples since the freeze, then a checkpoint with replays
	// paused by early stopping.
	feed(t, a, append(append([]*schemas.LabeledSample{}, held[16:21]...), train[64:80]...), 8, &off)
	a.early.best, a.early.bad, a.early.paused, a.early.sincePause = -1e9, 3, true, 2
	e4 := checkpoint(a)
	if e4.EvalEpoch != 5 || e4.EvalSetSHA256 != e3.EvalSetSHA256 {
		t.Fatalf("the epoch's second checkpoint: epoch %d, sha %s", e4.EvalEpoch, e4.EvalSetSHA256)
	}
	stopA()

	// critic_evals and critic_eval_diffs rows carry each evaluation's set.
	for _, e := range []*CheckpointEval{e1, e2, e3, e4} {
		for _, tb := range []string{"critic_evals", "critic_eval_diffs"} {
			var sha string
			var epoch, n uint64
			if err := ch.Conn.QueryRow(ctx, "SELECT any(eval_set_sha256), any(eval_epoch), count() FROM "+tb+" FINAL WHERE trainer = ? AND model_version = ?",
				"evalset", e.ModelVersion).Scan(&sha, &epoch, &n); err != nil {
				t.Fatal(err)
			}
			if n == 0 || sha != e.EvalSetSHA256 || epoch != uint64(e.EvalEpoch) {
				t.Errorf("%s of %s: %d rows with set %s epoch %d, want %s epoch %d", tb, e.ModelVersion, n, sha, epoch, e.EvalSetSHA256, e.EvalEpoch)
			}
		}
	}

	// A restart: a new trainer on the same directory.
	b := replayTrainer(t, nil, mod)
	b.evaluator = evaluator
	if err := b.openClickHouse(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.ch.Close()
	if err := b.restore(ctx); err != nil {
		t.Fatal(err)
	}
	if b.evalSet.epoch != 5 || b.evalSet.sha256 != e4.EvalSetSHA256 || b.evalSet.since != a.evalSet.since ||
		!reflect.DeepEqual(idsOf(b.evalSet.rows), idsOf(e4.Heldout)) {
		t.Fatalf("restored set: epoch %d, sha %s, since %d (want %d), rows %v", b.evalSet.epoch, b.evalSet.sha256, b.evalSet.since, a.evalSet.since, idsOf(b.evalSet.rows))
	}
	if !reflect.DeepEqual(idsOf(b.heldSet.snapshot()), idsOf(a.heldSet.snapshot())) || !reflect.DeepEqual(idsOf(b.trainWin.snapshot()), idsOf(a.trainWin.snapshot())) {
		t.Fatalf("restored windows: held-out ring %v (want %v), training window %v (want %v)",
			idsOf(b.heldSet.snapshot()), idsOf(a.heldSet.snapshot()), idsOf(b.trainWin.snapshot()), idsOf(a.trainWin.snapshot()))
	}
	if b.window.len() != 24 || !reflect.DeepEqual(b.window.snapshot(), a.window.snapshot()) {
		t.Fatalf("restored replay window: %d examples, not the uninterrupted trainer's %d", b.window.len(), a.window.len())
	}
	if b.earlyStopState() != a.earlyStopState() || metricValue(t, b.metrics.replayPaused) != 1 {
		t.Fatalf("restored early stopping %+v, want %+v", b.earlyStopState(), a.earlyStopState())
	}
	// The restored checkpoint is evaluated again: same rows, predictions
	// and verdict.
	stopB := b.startEvals(ctx)
	b.reevaluateRestored()
	r4 := next()
	stopB()
	if r4.ModelVersion != e4.ModelVersion || r4.CheckpointSHA256 != e4.CheckpointSHA256 || r4.EvalSetSHA256 != e4.EvalSetSHA256 ||
		r4.EvalEpoch != 5 || !reflect.DeepEqual(idsOf(r4.Heldout), idsOf(e4.Heldout)) || !reflect.DeepEqual(idsOf(r4.Train), idsOf(e4.Train)) ||
		!reflect.DeepEqual(r4.Model, e4.Model) {
		t.Fatalf("re-evaluation of %s after the restart differs from the evaluation before it", e4.ModelVersion)
	}
	if b.serving.warming(e4.ModelVersion) != (evalVerdict(t, ch, e4.ModelVersion) != VerdictBeats) {
		t.Fatalf("%s: served warming %v, verdict %q", e4.ModelVersion, b.serving.warming(e4.ModelVersion), evalVerdict(t, ch, e4.ModelVersion))
	}
	// The same samples after it: still paused (one step each, the same
	// loss, as many held-out samples since the freeze), then the epoch
	// ends at the same held-out sample in both.
	more := append(append([]*schemas.LabeledSample{}, train[80:88]...), held[21:31]...)
	offA, offB := off, off
	feed(t, a, more, len(more), &offA)
	feed(t, b, more, len(more), &offB)
	if a.earlyStopState() != b.earlyStopState() || !b.early.paused || a.evalSet.since != 15 || b.evalSet.since != 15 {
		t.Fatalf("after the same samples: early stopping %+v and %+v, since %d and %d", a.earlyStopState(), b.earlyStopState(),
			a.evalSet.since, b.evalSet.since)
	}
	feed(t, a, held[31:32], 1, &offA)
	feed(t, b, held[31:32], 1, &offB)
	if a.evalSet.epoch != 6 || b.evalSet.epoch != 6 || a.evalSet.sha256 != b.evalSet.sha256 || a.evalSet.sha256 != setHash(held[16:32]) {
		t.Fatalf("next epoch: %d %s and %d %s", a.evalSet.epoch, a.evalSet.sha256, b.evalSet.epoch, b.evalSet.sha256)
	}
	// The best loss is measured again on the new rows; the pause carries
	// on. (The two losses may differ in the last bits: the weights are
	// equal, the restored model's loss is not bit for bit the
	// uninterrupted one's.)
	sa, sb := a.earlyStopState(), b.earlyStopState()
	if math.Abs(sa.Best-sb.Best) > 1e-12*math.Abs(sa.Best) || sa.Bad != sb.Bad || sa.SincePause != sb.SincePause || !sa.Paused || !sb.Paused ||
		sa.Best == -1e9 || math.IsInf(sa.Best, 1) {
		t.Fatalf("early stopping after the epoch: %+v and %+v", sa, sb)
	}
}

// evalVerdict is the verdict of version's critic_evals rows.
func evalVerdict(t *testing.T, ch *testenv.CH, version string) string {
	t.Helper()
	var v string
	if err := ch.Conn.QueryRow(context.Background(), "SELECT any(verdict) FROM critic_evals FINAL WHERE model_version = ?", version).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// legacyCheckpoint is Checkpoint's header as files wrote it before the
// evaluation state was kept (issue 36).
type legacyCheckpoint struct {
	Index                int64
	ModelVersion         string
	Step, SamplesTrained int64
	Topic                string
	Offsets              map[int32]int64
	Recent               []string
	CellVersions         map[string]int32
	KeyedByProject       bool
	Project              string
	Heldout              []HeldoutRecord
	FirstGroup           string
	CreatedAt            time.Time
	Models               []ModelState
}

// rewriteAsLegacy rewrites checkpoint file path as one written before the
// evaluation state was kept: the same header fields but those, the same
// tensors, a valid sha256.
func rewriteAsLegacy(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	payload := raw[ckptHdrLen:]
	ml := binary.LittleEndian.Uint32(payload)
	var ck Checkpoint
	if err := gob.NewDecoder(bytes.NewReader(payload[4 : 4+ml])).Decode(&ck); err != nil {
		t.Fatal(err)
	}
	old := legacyCheckpoint{Index: ck.Index, ModelVersion: ck.ModelVersion, Step: ck.Step, SamplesTrained: ck.SamplesTrained, Topic: ck.Topic,
		Offsets: ck.Offsets, Recent: ck.Recent, CellVersions: ck.CellVersions, KeyedByProject: ck.KeyedByProject, Project: ck.Project,
		Heldout: ck.Heldout, FirstGroup: ck.FirstGroup, CreatedAt: ck.CreatedAt, Models: ck.Models}
	var mb bytes.Buffer
	if err := gob.NewEncoder(&mb).Encode(&old); err != nil {
		t.Fatal(err)
	}
	var np []byte
	np = binary.LittleEndian.AppendUint32(np, uint32(mb.Len()))
	np = append(append(np, mb.Bytes()...), payload[4+ml:]...)
	sum := sha256.Sum256(np)
	hdr := append([]byte(ckptMagic), binary.LittleEndian.AppendUint32(nil, ckptFormat)...)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(np)))
	if err := os.WriteFile(path, append(append(hdr, sum[:]...), np...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreCheckpointWithoutEvalState: a checkpoint written before the
// evaluation state was kept restores (weights, step, frontier) with an
// empty evaluation set, held-out ring and training window and fresh early
// stopping, evaluates nothing again, and begins epoch 1 with the first
// held-out sample read after the restart.
func TestRestoreCheckpointWithoutEvalState(t *testing.T) {
	t.Parallel()
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	mod := func(c *Config) {
		c.ClickHouse, c.Database, c.CheckpointDir, c.Name = ch.Addr, ch.Database, dir, "legacy-eval"
		c.HeldoutFraction, c.HeldoutWindow = 0.25, 16
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := replayTrainer(t, nil, mod)
	train, held := splitSamples(480, 0.25)
	var off int64
	feed(t, a, append(append([]*schemas.LabeledSample{}, train[:24]...), held[:6]...), 8, &off)
	a.early.best, a.early.bad = 0.5, 2
	if err := a.checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if a.evalSet.epoch != 3 { // sets of 1, 2 and 4 rows
		t.Fatalf("epoch %d before the rewrite", a.evalSet.epoch)
	}
	rewriteAsLegacy(t, filepath.Join(dir, FileName(a.index)))
	ck, err := ReadCheckpoint(filepath.Join(dir, FileName(a.index)))
	if err != nil || ck.EvalWindows || ck.EvalEpoch != 0 || len(ck.EvalTrain) != 0 || ck.Step != a.step {
		t.Fatalf("the rewritten file: %v; eval windows %v, epoch %d, %d training rows, step %d", err, ck.EvalWindows, ck.EvalEpoch, len(ck.EvalTrain), ck.Step)
	}

	b := replayTrainer(t, nil, mod)
	if err := b.openClickHouse(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.ch.Close()
	if err := b.restore(ctx); err != nil {
		t.Fatal(err)
	}
	if b.step != a.step || b.models[0].Steps() != a.models[0].Steps() {
		t.Fatalf("restored step %d, %d optimizer steps; want %d, %d", b.step, b.models[0].Steps(), a.step, a.models[0].Steps())
	}
	if b.evalSet.epoch != 0 || b.evalSet.rows != nil || b.heldSet.len() != 0 || b.trainWin.len() != 0 || b.window.len() != 0 ||
		!math.IsInf(b.early.best, 1) || b.early.bad != 0 || b.reeval != nil {
		t.Fatalf("restored from an old file: epoch %d, %d set rows, ring %d, training window %d, replay window %d, early stop %+v, re-evaluation %v",
			b.evalSet.epoch, len(b.evalSet.rows), b.heldSet.len(), b.trainWin.len(), b.window.len(), b.earlyStopState(), b.reeval != nil)
	}
	feed(t, b, append(append([]*schemas.LabeledSample{}, train[24:32]...), held[6:7]...), 8, &off)
	if b.evalSet.epoch != 1 || !reflect.DeepEqual(idsOf(b.evalSet.rows), idsOf(held[6:7])) {
		t.Fatalf("after the restart: epoch %d on %v", b.evalSet.epoch, idsOf(b.evalSet.rows))
	}
}
