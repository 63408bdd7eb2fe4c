package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// metricValue reads a gauge's or counter's value.
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// evalRow is one critic_evals row.
type evalRow struct {
	version, sha, predictor, metric, verdict string
	set                                      string
	epoch                                    uint64
	step, trained                            uint64
	rows, groups                             uint32
	value, lo, hi                            float64
}

// criticEvals returns trainer name's critic_evals rows (FINAL), which have
// project "" (AllProjects: the trainer trains on every project's samples).
func criticEvals(t *testing.T, ch *testenv.CH, name string) []evalRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := ch.Conn.Query(ctx, `SELECT model_version, checkpoint_sha256, eval_set_sha256, eval_epoch, predictor, metric, verdict, step, samples_trained,
		heldout_rows, heldout_groups, value, ci_low, ci_high FROM critic_evals FINAL WHERE trainer = ? AND project = '' ORDER BY step, predictor, metric`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []evalRow
	for rows.Next() {
		var r evalRow
		if err := rows.Scan(&r.version, &r.sha, &r.set, &r.epoch, &r.predictor, &r.metric, &r.verdict, &r.step, &r.trained, &r.rows, &r.groups, &r.value, &r.lo, &r.hi); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// diffRow is one critic_eval_diffs row.
type diffRow struct {
	version, sha, metric, baseline, verdict, ckVerdict string
	set                                                string
	epoch                                              uint64
	step, trained                                      uint64
	rows, groups                                       uint32
	diff, lo, hi                                       float64
	at                                                 time.Time
}

// criticEvalDiffs returns trainer name's critic_eval_diffs rows (FINAL),
// project "" like critic_evals'.
func criticEvalDiffs(t *testing.T, ch *testenv.CH, name string) []diffRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := ch.Conn.Query(ctx, `SELECT model_version, checkpoint_sha256, eval_set_sha256, eval_epoch, metric, baseline, verdict, checkpoint_verdict, step, samples_trained,
		heldout_rows, heldout_groups, diff, ci_low, ci_high, evaluated_at FROM critic_eval_diffs FINAL WHERE trainer = ? AND project = '' ORDER BY step, metric`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []diffRow
	for rows.Next() {
		var r diffRow
		if err := rows.Scan(&r.version, &r.sha, &r.set, &r.epoch, &r.metric, &r.baseline, &r.verdict, &r.ckVerdict, &r.step, &r.trained, &r.rows, &r.groups,
			&r.diff, &r.lo, &r.hi, &r.at); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// evalConfig is a small trainer that checkpoints often and holds out a
// quarter of the (campaign, seed) groups.
func evalConfig(addr string, ch *testenv.CH, name, dir string) Config {
	return Config{
		Brokers: []string{addr}, ClickHouse: ch.Addr, Database: ch.Database, Name: name, Group: name,
		CheckpointDir: dir, CheckpointEvery: 5, CheckpointInterval: 200 * time.Millisecond,
		BatchSize: 16, BatchAge: 20 * time.Millisecond, Device: "cpu", Listen: "off", HeldoutFraction: 0.25,
		Model: smallModel(), RowFlushInterval: 10 * time.Millisecond, SessionTimeout: time.Second,
	}
}

// failingEvalsCH fails every critic_evals and critic_eval_diffs insert
// with a non-retryable server error while fail is set.
type failingEvalsCH struct {
	driver.Conn
	fail atomic.Bool
}

func (c *failingEvalsCH) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	if c.fail.Load() && strings.Contains(query, "INTO critic_eval") {
		return nil, &clickhouse.Exception{Code: 60, Name: "UNKNOWN_TABLE", Message: "injected: the table is unavailable"}
	}
	return c.Conn.PrepareBatch(ctx, query, opts...)
}

// TestCheckpointEvaluationWritesRowsAndSurvivesFaults: every checkpoint is
// evaluated on held-out samples only (never trained), the checkpoints of one
// evaluation epoch on the same rows, the evaluator's rows
// land in critic_evals with the checkpoint's file sha256, its evaluation
// set's sha256 and epoch, step, samples
// trained and verdict, its comparisons in critic_eval_diffs (baseline,
// paired difference and interval, the metric's and the checkpoint's
// verdicts, the same evaluated_at), the verdict reaches the serving side; an
// evaluator that fails, panics, or whose rows cannot be written stops
// neither training nor checkpoints, and is counted.
func TestCheckpointEvaluationWritesRowsAndSurvivesFaults(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	cfg := evalConfig(addr, ch, "evalhook", dir)
	samples := genSamples(rand.New(rand.NewPCG(7, 8)), 0, 960)
	heldIDs := map[string]bool{}
	var want []string
	for _, s := range samples {
		if isHeldOutSample(s, cfg.HeldoutFraction) {
			heldIDs[s.SampleID] = true
		} else {
			want = append(want, s.SampleID)
		}
	}
	if len(heldIDs) == 0 || len(want) == 0 {
		t.Fatalf("%d held out, %d to train: the fixture needs both", len(heldIDs), len(want))
	}

	var mu sync.Mutex
	var seen []*CheckpointEval
	var calls atomic.Int64
	evaluator := func(ctx context.Context, in *CheckpointEval) (*EvalResult, error) {
		n := calls.Add(1)
		mu.Lock()
		seen = append(seen, in)
		mu.Unlock()
		switch n {
		case 1:
			return nil, errors.New("injected evaluation failure")
		case 2:
			panic("injected evaluator panic")
		}
		verdict := VerdictNoSignal
		if n%2 == 0 {
			verdict = VerdictBeats
		}
		// ρ's comparison has no signal on every checkpoint, and NLL's
		// difference is undefined (no row).
		return &EvalResult{Verdict: verdict, HeldoutRows: len(in.Heldout), HeldoutGroups: 3,
			Metrics: []EvalMetric{{Predictor: "model", Metric: EvalRMSE, Value: 0.1, Low: 0.05, High: 0.2},
				{Predictor: "median", Metric: EvalRMSE, Value: 0.3, Low: 0.2, High: 0.4}},
			Comparisons: []EvalComparison{{Metric: EvalRMSE, Baseline: "median", Diff: -0.2, Low: -0.3, High: -0.1, Verdict: verdict},
				{Metric: EvalSpearman, Baseline: "cell-mean", Diff: 0.05, Low: -0.02, High: 0.11, Verdict: VerdictNoSignal},
				{Metric: EvalNLL, Baseline: "median", Diff: math.NaN(), Low: math.NaN(), High: math.NaN(), Verdict: VerdictNoSignal}}}, nil
	}
	fch := &failingEvalsCH{}
	fch.fail.Store(true)
	reg := prometheus.NewRegistry()
	rt := startTrainer(t, cfg, WithCheckpointEvaluator(evaluator), WithRegisterer(reg),
		withClickHouse(func(c driver.Conn) driver.Conn { fch.Conn = c; return fch }))
	produce(t, addr, samples[:480])
	rt.waitTrained(t, ch, want[:len(want)/3])
	testenv.WaitFor(t, 30*time.Second, "three evaluations", func() (bool, string) {
		return calls.Load() >= 3, fmt.Sprintf("%d", calls.Load())
	})
	fch.fail.Store(false) // the writes succeed from now on
	produce(t, addr, samples[480:])
	rt.waitTrained(t, ch, want)
	testenv.WaitFor(t, 30*time.Second, "critic_evals rows", func() (bool, string) {
		n := len(criticEvals(t, ch, cfg.Name))
		return n > 0, fmt.Sprintf("%d rows", n)
	})
	rt.stop(t)

	// Held-out samples were never trained.
	for _, id := range trainedIDs(t, ch, cfg.Name) {
		if heldIDs[id] {
			t.Fatalf("held-out sample %s was trained", id)
		}
	}
	// Every evaluation saw held-out samples only, with the model's
	// predictions for each, and training samples only in its window; the
	// evaluations of one epoch saw the same rows, named by their hash.
	mu.Lock()
	job := map[string]*CheckpointEval{}
	epochRows := map[int64][]string{}
	for _, in := range seen {
		job[in.ModelVersion] = in
		if in.EvalEpoch < 1 || in.EvalSetSHA256 != setHash(in.Heldout) {
			t.Fatalf("evaluation of %s: epoch %d, set sha256 %q, want %s", in.ModelVersion, in.EvalEpoch, in.EvalSetSHA256, setHash(in.Heldout))
		}
		if ids, ok := epochRows[in.EvalEpoch]; ok && !slices.Equal(ids, idsOf(in.Heldout)) {
			t.Fatalf("evaluation of %s: epoch %d's rows changed", in.ModelVersion, in.EvalEpoch)
		}
		epochRows[in.EvalEpoch] = idsOf(in.Heldout)
		if len(in.Heldout) == 0 || len(in.Model) != len(in.Heldout) || in.GroupKey != GroupByCampaignSeed || in.CheckpointSHA256 == "" {
			t.Fatalf("evaluation of %s: %d held out, %d predictions, key %q, sha %q", in.ModelVersion, len(in.Heldout), len(in.Model), in.GroupKey, in.CheckpointSHA256)
		}
		for _, s := range in.Heldout {
			if !heldIDs[s.SampleID] {
				t.Fatalf("evaluation of %s holds out %s, which is on the training side", in.ModelVersion, s.SampleID)
			}
		}
		for _, s := range in.Train {
			if heldIDs[s.SampleID] {
				t.Fatalf("evaluation of %s has held-out %s in its training window", in.ModelVersion, s.SampleID)
			}
		}
	}
	mu.Unlock()

	// Rows: per evaluated checkpoint, both predictors with one verdict.
	rows := criticEvals(t, ch, cfg.Name)
	byVersion := map[string][]evalRow{}
	for _, r := range rows {
		byVersion[r.version] = append(byVersion[r.version], r)
	}
	var checked int
	for v, rs := range byVersion {
		if len(rs) != 2 || rs[0].verdict != rs[1].verdict || rs[0].sha != rs[1].sha || rs[0].step == 0 || rs[0].trained == 0 || rs[0].rows == 0 || rs[0].groups != 3 {
			t.Fatalf("%s: rows %+v", v, rs)
		}
		// The evaluation set's name and epoch are the evaluation's.
		if in := job[v]; in == nil || rs[0].set != in.EvalSetSHA256 || rs[1].set != in.EvalSetSHA256 || rs[0].epoch != uint64(in.EvalEpoch) || rs[1].epoch != rs[0].epoch {
			t.Fatalf("%s: rows name the set %s (epoch %d), the evaluation %+v", v, rs[0].set, rs[0].epoch, in)
		}
		// The sha256 is the checkpoint file's (for the files still kept).
		idx, ok := rt.tr.versionIndex(v)
		if !ok {
			t.Fatalf("row model_version %q", v)
		}
		if raw, err := os.ReadFile(filepath.Join(dir, FileName(idx))); err == nil {
			sum := sha256.Sum256(raw)
			if hex.EncodeToString(sum[:]) != rs[0].sha {
				t.Fatalf("%s: checkpoint_sha256 %s is not the file's", v, rs[0].sha)
			}
			checked++
			// The serving side has the verdict (it forgets those of
			// versions no longer kept).
			if w := rt.tr.serving.warming(v); w != (rs[0].verdict != VerdictBeats) {
				t.Fatalf("%s: verdict %q but serving warming=%v", v, rs[0].verdict, w)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no evaluated checkpoint is still kept")
	}
	// Diff rows: per checkpoint with critic_evals rows, its two defined
	// comparisons as the evaluator returned them, from the same evaluation.
	diffs := map[string][]diffRow{}
	for _, d := range criticEvalDiffs(t, ch, cfg.Name) {
		diffs[d.version] = append(diffs[d.version], d)
	}
	for v, rs := range byVersion {
		ds := diffs[v]
		if len(ds) != 2 || ds[0].metric != EvalRMSE || ds[1].metric != EvalSpearman {
			t.Fatalf("%s: diff rows %+v, want rmse and spearman", v, ds)
		}
		var at time.Time
		if err := ch.Conn.QueryRow(context.Background(), "SELECT max(evaluated_at) FROM critic_evals FINAL WHERE trainer = ? AND model_version = ?",
			cfg.Name, v).Scan(&at); err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.sha != rs[0].sha || d.set != rs[0].set || d.epoch != rs[0].epoch || d.step != rs[0].step || d.trained != rs[0].trained || d.rows != rs[0].rows || d.groups != 3 ||
				d.ckVerdict != rs[0].verdict || !d.at.Equal(at) {
				t.Fatalf("%s: diff row %+v does not match its critic_evals rows %+v (evaluated at %v)", v, d, rs[0], at)
			}
		}
		if r := ds[0]; r.baseline != "median" || r.diff != -0.2 || r.lo != -0.3 || r.hi != -0.1 || r.verdict != rs[0].verdict {
			t.Fatalf("%s: rmse diff row %+v, want median −0.2 [−0.3, −0.1] with the checkpoint's verdict %q", v, r, rs[0].verdict)
		}
		if r := ds[1]; r.baseline != "cell-mean" || r.diff != 0.05 || r.lo != -0.02 || r.hi != 0.11 || r.verdict != VerdictNoSignal {
			t.Fatalf("%s: spearman diff row %+v, want cell-mean 0.05 [−0.02, 0.11], no signal yet", v, r)
		}
	}
	t.Logf("%d evaluations in %d evaluation epochs, %d checkpoints with rows (%d sha256 checked against kept files)", calls.Load(), len(epochRows), len(byVersion), checked)
	if failures := metricValue(t, rt.tr.metrics.evalFailures); failures < 3 {
		t.Fatalf("eval_failures_total %v, want ≥ 3 (a failure, a panic, a failed write)", failures)
	}
	if d := metricValue(t, rt.tr.metrics.evalRMSEDiff); d != -0.2 {
		t.Fatalf("eval_rmse_diff %v, want -0.2", d)
	}
	for _, msg := range []string{"checkpoint evaluation failed", "evaluator panicked", "write critic_evals and critic_eval_diffs rows failed",
		"infra/chddl/0005", "infra/chddl/0006", `"message":"checkpoint evaluated"`} {
		if !strings.Contains(rt.logs.String(), msg) {
			t.Errorf("log lacks %q", msg)
		}
	}
}

// TestNoHeldOutNoEvaluation: with the held-out split off, checkpoints are
// written and not evaluated (nothing to evaluate on), and the trainer runs.
func TestNoHeldOutNoEvaluation(t *testing.T) {
	t.Parallel()
	tr, err := newIdleTrainer(t, WithCheckpointEvaluator(func(context.Context, *CheckpointEval) (*EvalResult, error) {
		t.Error("evaluator called without held-out samples")
		return nil, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	stop := tr.startEvals(context.Background())
	tr.submitEval(&Checkpoint{ModelVersion: "x-v1"})
	stop()
	_ = schemas.TopicSamples
}
