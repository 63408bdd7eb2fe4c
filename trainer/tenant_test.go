package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// asProjectSamples returns copies of samples in project, with the same
// sample, cell and campaign ids and the label turned around (a tenant's
// forgeries of another project's samples).
func asProjectSamples(samples []*schemas.LabeledSample, project string) []*schemas.LabeledSample {
	out := make([]*schemas.LabeledSample, len(samples))
	for i, s := range samples {
		c := *s
		c.Project = project
		c.EventID = "forged:" + s.SampleID
		c.Effect = -s.Effect
		out[i] = &c
	}
	return out
}

// TestTwoProjectsSampleIDsBothTrain: projA sends samples under projB's
// (future) sample ids first; projB's real samples then still train, each
// once, and a redelivery of projB's is still a duplicate. Before the
// duplicate check was keyed by (project, sample_id), projB's samples were
// skipped as duplicates of projA's forgeries.
func TestTwoProjectsSampleIDsBothTrain(t *testing.T) {
	t.Parallel()
	real := genSamples(rand.New(rand.NewPCG(7, 8)), 0, 48)
	for _, s := range real {
		s.Project = "projB"
	}
	forged := asProjectSamples(real, "projA")
	reg := prometheus.NewRegistry()
	tr := replayTrainer(t, reg, nil)
	var off int64
	feed(t, tr, forged, 8, &off)
	feed(t, tr, real, 8, &off)
	if tr.trained != 96 {
		t.Fatalf("samples_trained %d after 48 forged and 48 real samples with the same ids, want 96 (hf_trainer_duplicates_total %v)",
			tr.trained, gauge(t, reg, "hf_trainer_duplicates_total"))
	}
	feed(t, tr, real[:10], 8, &off)
	if d := gauge(t, reg, "hf_trainer_duplicates_total"); d != 10 || tr.trained != 96 {
		t.Fatalf("a redelivery of 10 of projB's samples: %v duplicates, samples_trained %d; want 10 and 96", d, tr.trained)
	}
}

// TestStalenessIsPerProject: a cell of projA at harness version 10 does not
// make projB's cell with the same id stale; within a project the staleness
// check drops as before. Before the table was keyed by (project, cell_id),
// projB's version-0 sample was 10 versions stale and dropped.
func TestStalenessIsPerProject(t *testing.T) {
	t.Parallel()
	tr := replayTrainer(t, nil, func(c *Config) { c.MaxStaleness = 1 })
	mk := func(project, id string, version int32) sampleMsg {
		s := genSamples(rand.New(rand.NewPCG(1, uint64(version))), 0, 1)[0]
		s.Project, s.SampleID, s.CellID, s.HarnessVersionIndex = project, id, "cell-x", version
		return sampleMsg{s: s}
	}
	in, err := tr.intake(context.Background(), []sampleMsg{mk("projA", "a-1", 10), mk("projB", "b-1", 0), mk("projB", "b-2", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if in.dropped != 0 || len(in.train) != 3 {
		t.Fatalf("%d dropped as stale, %d trained; want 0 and 3: projA's cell version made projB's cell stale", in.dropped, len(in.train))
	}
	if len(tr.cells) != 2 || tr.cells[projectKey("projA", "cell-x")] != 10 || tr.cells[projectKey("projB", "cell-x")] != 1 {
		t.Fatalf("staleness table %v", tr.cells)
	}
	in, err = tr.intake(context.Background(), []sampleMsg{mk("projA", "a-2", 8)})
	if err != nil || in.dropped != 1 {
		t.Fatalf("projA's sample 2 versions behind its cell: %d dropped (%v), want 1", in.dropped, err)
	}
}

// TestHeldoutGroupsArePerProject: two projects' samples of one campaign
// and seed (or cell, or sample id) are two held-out groups, named alike by
// GroupOf and trainer/eval; the default project's names are unchanged.
func TestHeldoutGroupsArePerProject(t *testing.T) {
	t.Parallel()
	s := &schemas.LabeledSample{SampleID: "s1", CellID: "c1", CampaignID: "camp", Seed: 7}
	for _, key := range []string{GroupByCampaign, GroupByCampaignSeed, GroupByCell} {
		groups := map[string]bool{}
		for _, p := range []string{"projA", "projB", schemas.DefaultProject} {
			c := *s
			c.Project = p
			groups[GroupOf(key, &c)] = true
		}
		if len(groups) != 3 {
			t.Errorf("%s: %d groups for three projects: %v", key, len(groups), groups)
		}
	}
	c := *s
	c.Project = "projA"
	if got := GroupOf(GroupByCampaignSeed, &c); got != `project:"projA"/campaign:camp/seed:7` {
		t.Errorf("projA's group %q", got)
	}
	c.Project = schemas.DefaultProject
	if got := GroupOf(GroupByCampaignSeed, &c); got != "campaign:camp/seed:7" {
		t.Errorf("the default project's group %q, want the name it had before projects (campaign:camp/seed:7)", got)
	}
}

// TestDedupWindowFromAnOldCheckpoint: a window restored from a checkpoint
// written before the keys held the project matches its bare sample ids in
// every project (as the check did then) until they age out; a new one
// matches by (project, sample id) and comes back from ordered() as it was.
func TestDedupWindowFromAnOldCheckpoint(t *testing.T) {
	t.Parallel()
	d := newDedup(3, []string{"s-1", "s-2"}, true)
	if !d.hasSample("projA", "s-1") || !d.hasSample("projB", "s-2") || d.hasSample("projA", "s-3") {
		t.Fatal("legacy ids not matched in every project")
	}
	for i := range 3 {
		d.add(projectKey("p", fmt.Sprint("n-", i)))
	}
	if d.hasSample("projA", "s-1") || d.hasSample("projA", "s-2") || d.legacy != 0 {
		t.Fatalf("legacy ids still matched after aging out (%d left)", d.legacy)
	}
	again := dedupFromDigests(3, d.ordered(), d.legacy)
	if !again.hasSample("p", "n-2") || again.hasSample("q", "n-2") || !bytes.Equal(again.ordered(), d.ordered()) {
		t.Fatal("a restored window lost its project keys")
	}
	// A window restored from digests with legacy entries left keeps them
	// as legacy (matched in every project) until they age out.
	old := newDedup(4, []string{"s-1", "s-2"}, true)
	old.add(projectKey("p", "n-0"))
	back := dedupFromDigests(4, old.ordered(), old.legacy)
	if back.legacy != 2 || !back.hasSample("projC", "s-2") || !back.hasSample("p", "n-0") || back.hasSample("q", "n-0") {
		t.Fatalf("a window restored from digests lost its legacy entries (%d legacy)", back.legacy)
	}
	back.add(projectKey("p", "n-1"))
	back.add(projectKey("p", "n-2"))
	if back.legacy != 1 || back.hasSample("projC", "s-1") || !back.hasSample("projC", "s-2") {
		t.Fatalf("the oldest legacy entry did not age out first (%d legacy)", back.legacy)
	}
	if projectKey("a/b", "c") == projectKey("a", "b/c") {
		t.Fatal("projectKey is ambiguous")
	}
}

// TestCheckpointEventIsTheTrainers: checkpoint_published carries the
// trainer's identity, project "" (no tenant's: the gateway gives every
// tenant event its non-empty project) and source trainer:<name>, which
// the checkpoints table keys by.
func TestCheckpointEventIsTheTrainers(t *testing.T) {
	t.Parallel()
	ev := checkpointEvent(&Checkpoint{ModelVersion: "t-v3", Step: 3}, "t")
	if ev.Project != "" || ev.Source != "trainer:t" || ev.EventID != "checkpoint:t-v3" {
		t.Fatalf("checkpoint event project %q source %q id %q", ev.Project, ev.Source, ev.EventID)
	}
}

// projectSamples returns n samples of project (ids prefixed by it), from
// seed's generator.
func projectSamples(project string, seed uint64, n int) []*schemas.LabeledSample {
	ss := genSamples(rand.New(rand.NewPCG(seed, seed+1)), 0, n)
	for _, s := range ss {
		s.Project, s.SampleID = project, project+"-"+s.SampleID
		s.EventID = "sample:" + s.SampleID
	}
	return ss
}

// interleave alternates a's and b's samples.
func interleave(a, b []*schemas.LabeledSample) []*schemas.LabeledSample {
	var out []*schemas.LabeledSample
	for i := range max(len(a), len(b)) {
		if i < len(a) {
			out = append(out, a[i])
		}
		if i < len(b) {
			out = append(out, b[i])
		}
	}
	return out
}

// TestPerProjectTrainerTrainsItsProjectOnly: a trainer of project "a" fed
// samples of "a" and "b" trains on a's alone; b's are counted in
// hf_trainer_foreign_samples_total, touch neither the duplicate and
// staleness tables nor the evaluation windows, and are not dead-lettered
// even when invalid, while the frontier moves past them; its model is the
// one a trainer fed a's samples alone trains. A trainer of all projects
// trains both. Before Config.Project, one trainer trained every project's
// samples into the model that served all.
func TestPerProjectTrainerTrainsItsProjectOnly(t *testing.T) {
	t.Parallel()
	a, b := projectSamples("a", 1, 48), projectSamples("b", 2, 48)
	// b's cells at a higher harness version: had they reached the
	// staleness table they would not be a's (keys hold the project), but
	// the table would hold 24 cells.
	for _, s := range b {
		s.HarnessVersionIndex += 100
	}
	badB := *b[5]
	badB.Effect = 7 // invalid: dead-lettering it would need hf.dlq, which this trainer has none of
	bWithBad := append(append([]*schemas.LabeledSample(nil), b...), &badB)
	mixed := interleave(a, bWithBad)

	reg := prometheus.NewRegistry()
	perProject := func(c *Config) { c.Project = "a"; c.ReplayRatio = -1; c.MaxStaleness = 1; c.HeldoutFraction = 0.25 }
	tr := replayTrainer(t, reg, perProject)
	var off int64
	feed(t, tr, mixed, 8, &off)
	alone := replayTrainer(t, nil, perProject)
	var off2 int64
	feed(t, alone, a, 4, &off2) // the a's of each batch of 8 interleaved

	if tr.trained == 0 || tr.trained != alone.trained || tr.step != alone.step {
		t.Fatalf("trainer of project a: samples_trained %d in %d steps after 48 of a's and 49 of b's; fed a's alone %d in %d",
			tr.trained, tr.step, alone.trained, alone.step)
	}
	if f := gauge(t, reg, "hf_trainer_foreign_samples_total"); f != 49 {
		t.Fatalf("hf_trainer_foreign_samples_total %v, want 49", f)
	}
	if bad, stale := gauge(t, reg, "hf_trainer_bad_samples_total"), gauge(t, reg, "hf_trainer_dropped_stale_total"); bad != 0 || stale != 0 {
		t.Fatalf("b's samples counted by a's trainer: %v bad, %v stale", bad, stale)
	}
	if tr.offsets[0] != off {
		t.Fatalf("frontier %d, want %d (past the skipped samples too)", tr.offsets[0], off)
	}
	if tr.dedup.hasSample("b", b[0].SampleID) || len(tr.cells) != 12 {
		t.Fatalf("b's samples reached the duplicate window or the staleness table (%d cells, want a's 12)", len(tr.cells))
	}
	for _, s := range append(tr.trainWin.snapshot(), tr.heldSet.snapshot()...) {
		if s.Project != "a" {
			t.Fatalf("%s of project %q in the evaluation windows", s.SampleID, s.Project)
		}
	}
	if tr.window.len() != alone.window.len() {
		t.Fatalf("replay window %d examples, fed a's alone %d", tr.window.len(), alone.window.len())
	}
	in := []*Input{{Update: "use a checklist", Kind: "skill"}, {Update: a[3].Update, Query: a[3].Query}}
	got, want := tr.Predict(in), alone.Predict(in)
	for i := range in {
		if got[i].Effect != want[i].Effect || got[i].Std != want[i].Std {
			t.Fatalf("input %d: a's trainer fed a's and b's samples predicts %v±%v, fed a's alone %v±%v: b's samples moved it",
				i, got[i].Effect, got[i].Std, want[i].Effect, want[i].Std)
		}
	}

	// A trainer of all projects trains both.
	all := replayTrainer(t, nil, func(c *Config) { c.ReplayRatio = -1 })
	off = 0
	feed(t, all, interleave(a, b), 8, &off)
	if all.trained != 96 {
		t.Fatalf("trainer of all projects: samples_trained %d, want 96", all.trained)
	}
}

// TestSamplesWithoutProjectAreTheDefaultProjects: a trainer of the default
// project trains samples that name no project; another project's trainer
// skips them.
func TestSamplesWithoutProjectAreTheDefaultProjects(t *testing.T) {
	t.Parallel()
	ss := projectSamples("", 3, 16)
	def := replayTrainer(t, nil, func(c *Config) { c.Project = schemas.DefaultProject })
	var off int64
	feed(t, def, ss, 8, &off)
	other := replayTrainer(t, nil, func(c *Config) { c.Project = "a" })
	off = 0
	feed(t, other, ss, 8, &off)
	if def.trained != 16 || other.trained != 0 {
		t.Fatalf("samples without a project: trained %d by the default project's trainer (want 16), %d by a's (want 0)", def.trained, other.trained)
	}
}

// TestProjectConfig: a per-project trainer's group and name default to
// hf-trainer-<project> (two trainers of different projects neither split
// one group's partitions nor share trainer_steps, critic_evals or
// checkpoints rows); given ones are kept; a project with spaces is refused.
func TestProjectConfig(t *testing.T) {
	t.Parallel()
	c := Config{Project: "acme"}
	c.setDefaults()
	if c.Group != "hf-trainer-acme" || c.Name != "hf-trainer-acme" {
		t.Fatalf("project acme: group %q name %q, want hf-trainer-acme", c.Group, c.Name)
	}
	c = Config{Project: "acme", Group: "g"}
	c.setDefaults()
	if c.Group != "g" || c.Name != "g" {
		t.Fatalf("given group: %q %q", c.Group, c.Name)
	}
	if d := DefaultConfig(); d.Group != "hf-trainer" || d.Name != "hf-trainer" || d.Project != AllProjects {
		t.Fatalf("default group %q name %q project %q", d.Group, d.Name, d.Project)
	}
	for _, p := range []string{"a b", "a\nb", "x\x1b[2J", strings.Repeat("p", maxProjectLen+1)} {
		c := Config{Brokers: []string{"b:1"}, ClickHouse: "c:1", CheckpointDir: "d", Project: p}
		c.setDefaults()
		if err := c.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--project") {
			t.Errorf("project %q: %v, want a config error naming --project", p, err)
		}
	}
}

// TestScoreIsScopedToTheTrainersProject: a trainer of project "a" answers
// 403, naming which trainer serves which project, to a /v1/score or
// /v1/rewards request naming project "b" (body or ?project=), and answers
// a's and requests that name none; a trainer of all projects answers any.
// Before, every trainer scored for every project.
func TestScoreIsScopedToTheTrainersProject(t *testing.T) {
	t.Parallel()
	tr, err := httpTrainer(t, Config{Project: "a"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	const upd = `"update":"use a checklist","kind":"skill"`
	const rew = `"query":["prompt: fix it. answer: use a checklist"],"prompts":["prompt: fix it."]`
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/v1/score", `{` + upd + `,"project":"b"}`, http.StatusForbidden},
		{"/v1/score?project=b", `{` + upd + `}`, http.StatusForbidden},
		{"/v1/score?project=a", `{` + upd + `,"project":"b"}`, http.StatusBadRequest},
		{"/v1/rewards", `{` + rew + `,"project":"b"}`, http.StatusForbidden},
		{"/v1/rewards?project=b", `{` + rew + `}`, http.StatusForbidden},
		{"/v1/score", `{` + upd + `,"project":"a"}`, http.StatusOK},
		{"/v1/score?project=a", `{` + upd + `}`, http.StatusOK},
		{"/v1/score", `{` + upd + `}`, http.StatusOK},
		{"/v1/rewards", `{` + rew + `,"project":"a"}`, http.StatusOK},
		{"/v1/rewards", `{` + rew + `}`, http.StatusOK},
	} {
		code, raw := postJSON(t, srv.Client(), srv.URL+c.path, []byte(c.body))
		body := string(raw)
		if code != c.want {
			t.Fatalf("POST %s %s = %d %s, want %d", c.path, c.body, code, body, c.want)
		}
		if code == http.StatusForbidden && (!strings.Contains(body, `serves project \"a\" only`) || !strings.Contains(body, `project \"b\"`) || !strings.Contains(body, tr.cfg.Name)) {
			t.Fatalf("POST %s: 403 %s, want it to say that trainer %s serves project a, not b", c.path, body, tr.cfg.Name)
		}
	}

	all, err := httpTrainer(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(all.Handler())
	defer srv2.Close()
	if code, body := postJSON(t, srv2.Client(), srv2.URL+"/v1/score", []byte(`{`+upd+`,"project":"b"}`)); code != http.StatusOK {
		t.Fatalf("trainer of all projects, project b: %d %s, want 200", code, body)
	}
}

// TestPerProjectTrainerEndToEnd: on a real broker and ClickHouse, a
// trainer of project "a" reading a topic of a's and b's samples trains
// a's (its trainer_steps rows hold a's sample ids alone), evaluates its
// checkpoints on a's held-out samples with critic_evals and
// critic_eval_diffs rows of project "a", and its checkpoints carry the
// project: a trainer of another project, or of all, refuses its directory.
func TestPerProjectTrainerEndToEnd(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	ch := testenv.ClickHouse(t)
	dir := t.TempDir()
	cfg := evalConfig(addr, ch, "", dir)
	cfg.Project, cfg.Name, cfg.Group = "a", "", ""
	a, b := projectSamples("a", 5, 480), projectSamples("b", 6, 480)
	var want []string
	for _, s := range a {
		if !isHeldOutSample(s, cfg.HeldoutFraction) {
			want = append(want, s.SampleID)
		}
	}
	var mu sync.Mutex
	var seen []*CheckpointEval
	evaluator := func(ctx context.Context, in *CheckpointEval) (*EvalResult, error) {
		mu.Lock()
		seen = append(seen, in)
		mu.Unlock()
		return &EvalResult{Verdict: VerdictNoSignal, HeldoutRows: len(in.Heldout), HeldoutGroups: 1,
			Metrics:     []EvalMetric{{Predictor: "model", Metric: EvalRMSE, Value: 0.1, Low: 0.05, High: 0.2}},
			Comparisons: []EvalComparison{{Metric: EvalRMSE, Baseline: "median", Diff: -0.1, Low: -0.2, High: 0.1, Verdict: VerdictNoSignal}}}, nil
	}
	reg := prometheus.NewRegistry()
	rt := startTrainer(t, cfg, WithCheckpointEvaluator(evaluator), WithRegisterer(reg))
	if rt.tr.cfg.Name != "hf-trainer-a" || rt.tr.cfg.Group != "hf-trainer-a" {
		t.Fatalf("name %q group %q, want hf-trainer-a", rt.tr.cfg.Name, rt.tr.cfg.Group)
	}
	produce(t, addr, interleave(a, b))
	rt.waitTrained(t, ch, want)
	testenv.WaitFor(t, 30*time.Second, "b's samples skipped", func() (bool, string) {
		f := gauge(t, reg, "hf_trainer_foreign_samples_total")
		return f == float64(len(b)), fmt.Sprint(f)
	})
	var rows, diffs, otherRows uint64
	testenv.WaitFor(t, 30*time.Second, "critic_evals and critic_eval_diffs rows of project a", func() (bool, string) {
		ctx := context.Background()
		if err := ch.Conn.QueryRow(ctx, "SELECT count() FROM critic_evals FINAL WHERE trainer = 'hf-trainer-a' AND project = 'a'").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := ch.Conn.QueryRow(ctx, "SELECT count() FROM critic_eval_diffs FINAL WHERE trainer = 'hf-trainer-a' AND project = 'a'").Scan(&diffs); err != nil {
			t.Fatal(err)
		}
		return rows > 0 && diffs > 0, fmt.Sprintf("%d and %d rows", rows, diffs)
	})
	rt.stop(t)
	for _, q := range []string{"SELECT count() FROM critic_evals FINAL WHERE project != 'a'", "SELECT count() FROM critic_eval_diffs FINAL WHERE project != 'a'"} {
		if err := ch.Conn.QueryRow(context.Background(), q).Scan(&otherRows); err != nil || otherRows != 0 {
			t.Fatalf("%s: %d (%v), want 0", q, otherRows, err)
		}
	}
	for _, id := range trainedIDs(t, ch, "hf-trainer-a") {
		if !strings.HasPrefix(id, "a-") {
			t.Fatalf("trainer of project a trained %s", id)
		}
	}
	mu.Lock()
	for _, in := range seen {
		if in.Project != "a" || in.Trainer != "hf-trainer-a" {
			t.Fatalf("evaluation of %s: project %q trainer %q", in.ModelVersion, in.Project, in.Trainer)
		}
		for _, s := range append(append([]*schemas.LabeledSample(nil), in.Heldout...), in.Train...) {
			if s.Project != "a" {
				t.Fatalf("evaluation of %s holds %s of project %q", in.ModelVersion, s.SampleID, s.Project)
			}
		}
	}
	mu.Unlock()
	if ck := latest(t, dir); ck.Project != "a" || !strings.HasPrefix(ck.ModelVersion, "hf-trainer-a-v") {
		t.Fatalf("checkpoint project %q version %q", ck.Project, ck.ModelVersion)
	}

	// Another project's trainer, or one of all projects, refuses the directory.
	for _, p := range []string{"b", AllProjects} {
		c := cfg
		c.Project = p
		tr, err := New(c, WithLogger(zerolog.Nop()), WithBackend(backend.NewCPU()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = tr.Run(ctx)
		cancel()
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), `project "a"`) || !strings.Contains(err.Error(), "--checkpoint-dir") {
			t.Fatalf("project %q on project a's checkpoints: %v, want ErrIncompatible naming project a and --checkpoint-dir", p, err)
		}
	}

	// A checkpoint of all projects (as every earlier release wrote) is
	// refused by a project's trainer unless it adopts it (up does); the
	// adopted model goes on, and its next checkpoint is the project's.
	shared := latest(t, dir)
	shared.Project = AllProjects
	sharedDir := t.TempDir()
	store, err := NewCheckpointStore(sharedDir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Save(shared); err != nil {
		t.Fatal(err)
	}
	for _, adopt := range []bool{false, true} {
		c := cfg
		c.CheckpointDir, c.AdoptSharedCheckpoint = sharedDir, adopt
		tr, err := New(c, WithLogger(zerolog.Nop()), WithBackend(backend.NewCPU()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = tr.Run(ctx)
		cancel()
		switch {
		case !adopt && !errors.Is(err, ErrIncompatible):
			t.Fatalf("project a on a checkpoint of all projects: %v, want ErrIncompatible", err)
		case adopt && err != nil:
			t.Fatalf("project a adopting a checkpoint of all projects: %v", err)
		case adopt && tr.ModelVersion() != shared.ModelVersion && latest(t, sharedDir).Project != "a":
			t.Fatalf("adopted: serving %q (checkpoint %q), latest checkpoint's project %q", tr.ModelVersion(), shared.ModelVersion, latest(t, sharedDir).Project)
		}
	}
}

// TestCorrectedSampleIsTrainedRedeliveryIsNot: the processors correct a
// labeled sample by publishing it again under its id with other figures
// (late events); the trainer trains the correction, and still skips a
// redelivery of either revision.
func TestCorrectedSampleIsTrainedRedeliveryIsNot(t *testing.T) {
	t.Parallel()
	tr := replayTrainer(t, nil, nil)
	first := genSamples(rand.New(rand.NewPCG(3, 4)), 0, 1)[0]
	corrected := *first
	corrected.Effect, corrected.NAfter = first.Effect+0.25, first.NAfter+2
	in, err := tr.intake(context.Background(), []sampleMsg{{s: first}, {s: first}, {s: &corrected}, {s: &corrected}})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.train)+len(in.held) != 2 || in.dup != 2 {
		t.Fatalf("%d kept, %d duplicates; want 2 (the sample and its correction) and 2 (their redeliveries)", len(in.train)+len(in.held), in.dup)
	}
	// A window a checkpoint remembered by bare (project, id) still
	// skips the sample.
	old := replayTrainer(t, nil, nil)
	old.dedup.add(projectKey(first.Project, first.SampleID))
	if in, err := old.intake(context.Background(), []sampleMsg{{s: first}}); err != nil || in.dup != 1 {
		t.Fatalf("a sample remembered by its bare id: %d duplicates (%v), want 1", in.dup, err)
	}
}
