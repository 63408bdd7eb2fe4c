package trainer

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// isHeldOutSample is the trainer's held-out predicate for s at fraction
// (default group key).
func isHeldOutSample(s *schemas.LabeledSample, fraction float64) bool {
	return IsHeldOutGroup(GroupOf(GroupByCampaignSeed, s), fraction)
}

func TestGroupOfNamesGroupsLikeEval(t *testing.T) {
	t.Parallel()
	s := &schemas.LabeledSample{SampleID: "s1", CellID: "c1", CampaignID: "camp", Seed: 7}
	for key, want := range map[string]string{GroupByCampaign: "campaign:camp", GroupByCampaignSeed: "campaign:camp/seed:7",
		"": "campaign:camp/seed:7", GroupByCell: "cell:c1"} {
		if got := GroupOf(key, s); got != want {
			t.Errorf("GroupOf(%q) = %q, want %q", key, got, want)
		}
	}
	if got := GroupOf(GroupByCampaignSeed, &schemas.LabeledSample{SampleID: "s1", CellID: "c1"}); got != "cell:c1" {
		t.Errorf("no campaign: %q, want cell:c1", got)
	}
	if got := GroupOf(GroupByCampaign, &schemas.LabeledSample{SampleID: "s1"}); got != "sample:s1" {
		t.Errorf("no campaign or cell: %q, want sample:s1", got)
	}
	if IsHeldOutGroup("campaign:camp/seed:7", 0) || IsHeldOutGroup("campaign:camp/seed:7", -1) || !IsHeldOutGroup("campaign:camp/seed:7", 1) {
		t.Error("fraction 0, -1 must hold out nothing and 1 everything")
	}
}

// TestIntakeHoldsOutWholeGroups: the trainer's intake splits by (campaign,
// seed) group: no group has samples on both sides, a round's siblings are
// together, some groups are held out, the held-out samples are never among
// the training examples, and the evaluation's held-out set and training
// window hold exactly the two sides (bounded by their windows).
func TestIntakeHoldsOutWholeGroups(t *testing.T) {
	t.Parallel()
	tr, err := newIdleTrainer(t)
	if err != nil {
		t.Fatal(err)
	}
	tr.cfg.HeldoutFraction = 0.2
	tr.heldSet, tr.trainWin = newSampleRing(100000), newSampleRing(100000)
	samples := genSamples(rand.New(rand.NewPCG(1, 2)), 0, 2400)
	batch := make([]sampleMsg, len(samples))
	for i, s := range samples {
		batch[i] = sampleMsg{part: 0, off: int64(i), s: s}
	}
	in, err := tr.intake(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	side := map[string]bool{} // group → held out
	for _, s := range tr.heldSet.snapshot() {
		side[GroupOf(GroupByCampaignSeed, s)] = true
	}
	trained := map[string]bool{}
	for _, id := range in.ids {
		trained[id] = true
	}
	for _, s := range tr.trainWin.snapshot() {
		g := GroupOf(GroupByCampaignSeed, s)
		if side[g] {
			t.Fatalf("group %s is on both sides", g)
		}
		if !trained[s.SampleID] {
			t.Fatalf("training window holds %s, which was not trained", s.SampleID)
		}
	}
	heldIDs := map[string]bool{}
	for _, s := range tr.heldSet.snapshot() {
		heldIDs[s.SampleID] = true
		if trained[s.SampleID] {
			t.Fatalf("held-out sample %s was trained", s.SampleID)
		}
	}
	// Siblings (one round: ids 12r..12r+11) are on one side.
	for r := 0; r < len(samples)/12; r++ {
		h := heldIDs[samples[12*r].SampleID]
		for _, s := range samples[12*r : 12*r+12] {
			if heldIDs[s.SampleID] != h {
				t.Fatalf("round %d is split: %s held out %v, %s %v", r, samples[12*r].SampleID, h, s.SampleID, heldIDs[s.SampleID])
			}
		}
	}
	if len(side) == 0 || len(side) == 40 || len(in.held) != len(heldIDs) || len(in.train)+len(in.held) != len(samples) {
		t.Fatalf("%d of 40 groups held out, %d held-out examples, %d set, %d trained of %d", len(side), len(in.held), len(heldIDs), len(in.train), len(samples))
	}
	t.Logf("%d of 40 groups held out: %d held-out and %d training samples", len(side), len(in.held), len(in.train))

	// The windows are bounded by count, keeping the most recent.
	r := newSampleRing(3)
	for _, s := range samples[:10] {
		r.add(s)
	}
	if got := r.snapshot(); len(got) != 3 || got[0] != samples[7] || got[2] != samples[9] {
		t.Fatalf("ring of 3 after 10 adds holds %d, first %s", len(got), got[0].SampleID)
	}
}

func TestConfigRejectsUnknownGroupKey(t *testing.T) {
	t.Parallel()
	c := Config{Brokers: []string{"b"}, ClickHouse: "c", CheckpointDir: "d", HeldoutGroupKey: "round"}
	c.setDefaults()
	if err := c.Validate(); err == nil {
		t.Fatal("group key round accepted")
	}
	if d := DefaultConfig(); d.HeldoutGroupKey != GroupByCampaignSeed || d.EvalTrainWindow != 5000 || d.HeldoutWindow != 2000 {
		t.Fatalf("defaults: key %q, train window %d, held-out window %d", d.HeldoutGroupKey, d.EvalTrainWindow, d.HeldoutWindow)
	}
}

// TestFirstGroupTrainsEvenIfHeldOut: a stream whose first group hashes into
// the held-out fraction is trained on (else a one-group stream, as `up
// --demo` sends, never trains); every later held-out group is held out;
// the exception is kept in the checkpoint file.
func TestFirstGroupTrainsEvenIfHeldOut(t *testing.T) {
	t.Parallel()
	tr, err := newIdleTrainer(t)
	if err != nil {
		t.Fatal(err)
	}
	tr.cfg.HeldoutFraction = 0.9
	tr.heldSet, tr.trainWin = newSampleRing(100000), newSampleRing(100000)
	samples := genSamples(rand.New(rand.NewPCG(3, 4)), 0, 480) // 40 groups of one round each
	// Start the stream with a group in the fraction.
	first := -1
	for i, s := range samples {
		if isHeldOutSample(s, 0.9) {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("no group in the held-out fraction")
	}
	samples = append(samples[first:], samples[:first]...)
	firstGroup := GroupOf(GroupByCampaignSeed, samples[0])
	batch := make([]sampleMsg, len(samples))
	for i, s := range samples {
		batch[i] = sampleMsg{part: 0, off: int64(i), s: s}
	}
	in, err := tr.intake(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if tr.firstGroup != firstGroup {
		t.Fatalf("first group %q, want %q", tr.firstGroup, firstGroup)
	}
	nFirst := 0
	for _, s := range tr.trainWin.snapshot() {
		g := GroupOf(GroupByCampaignSeed, s)
		if g == firstGroup {
			nFirst++
		} else if isHeldOutSample(s, 0.9) {
			t.Fatalf("%s of held-out group %s trained", s.SampleID, g)
		}
	}
	for _, s := range tr.heldSet.snapshot() {
		if GroupOf(GroupByCampaignSeed, s) == firstGroup || !isHeldOutSample(s, 0.9) {
			t.Fatalf("%s held out wrongly", s.SampleID)
		}
	}
	if nFirst == 0 || len(in.held) == 0 {
		t.Fatalf("%d samples of the first group trained, %d held out", nFirst, len(in.held))
	}

	// A trainer that has trained (or restored a checkpoint that has) holds
	// a held-out first group out.
	tr2, err := newIdleTrainer(t)
	if err != nil {
		t.Fatal(err)
	}
	tr2.cfg.HeldoutFraction = 0.9
	tr2.trainedAny = true
	if !tr2.holdOut(samples[0]) || tr2.firstGroup != "" {
		t.Fatal("a trained trainer took a held-out group for its first")
	}

	// The exception survives a checkpoint file.
	m, err := NewModel(backend.NewCPU(), smallModel())
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewCheckpointStore(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	path, err := store.Save(&Checkpoint{Index: 1, ModelVersion: "v1", Topic: schemas.TopicSamples, FirstGroup: firstGroup,
		Models: []ModelState{m.State()}})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if ck.FirstGroup != firstGroup {
		t.Fatalf("checkpoint's first group %q, want %q", ck.FirstGroup, firstGroup)
	}
}
