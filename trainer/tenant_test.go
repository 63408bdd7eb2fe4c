package trainer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harnessflow/harnessflow/schemas"
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
	again := newDedup(3, d.ordered(), false)
	if !again.hasSample("p", "n-2") || again.hasSample("q", "n-2") {
		t.Fatal("a restored window lost its project keys")
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
	ev := checkpointEvent(&Checkpoint{ModelVersion: "t-v3", Step: 3}, "t")
	if ev.Project != "" || ev.Source != "trainer:t" || ev.EventID != "checkpoint:t-v3" {
		t.Fatalf("checkpoint event project %q source %q id %q", ev.Project, ev.Source, ev.EventID)
	}
}
