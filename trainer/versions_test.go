package trainer

import (
	"context"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A checkpoint is a new model version: with nothing trained since the last
// one (only held-out or duplicate samples read), housekeeping writes none,
// even when it is due or final; after a step it writes the next.
func TestNoNewVersionWithoutTraining(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Name: "v"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := tr.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	tr.dirty = true // a held-out sample was read
	if err := tr.housekeeping(ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := tr.store.MaxIndex(); n != 1 {
		t.Fatalf("checkpoint %d written without training; want the version to stay v1", n)
	}
	trainStep(t, tr)
	tr.dirty = true
	if err := tr.housekeeping(ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := tr.store.MaxIndex(); n != 2 {
		t.Fatalf("after a training step: checkpoint %d, want 2", n)
	}
}

// A version answered for a pinned request stays on disk beyond
// CheckpointKeep while its pin is younger than PinRetention, and is pruned
// once the pin has lapsed.
func TestPinnedCheckpointOutlivesKeep(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Name: "p", CheckpointKeep: 1, PinRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	ck1 := publishCheckpoint(t, tr)
	trainStep(t, tr)
	publishCheckpoint(t, tr)
	if _, err := os.Stat(ck1.Path()); err == nil {
		t.Fatal("checkpoint 1 kept beyond --checkpoint-keep 1 without a pin: the test proves nothing")
	}
	// Pin the newest, then publish two more: it outlives the keep of 1.
	ck3 := publishCheckpoint(t, tr)
	s := scoreAt(t, srv.Client(), srv.URL, "?model_version="+ck3.ModelVersion)
	trainStep(t, tr)
	publishCheckpoint(t, tr)
	trainStep(t, tr)
	publishCheckpoint(t, tr)
	if p := scoreAt(t, srv.Client(), srv.URL, "?model_version="+ck3.ModelVersion); p.Effect != s.Effect {
		t.Fatalf("pinned %s answers %v after two newer versions, first %v", ck3.ModelVersion, p.Effect, s.Effect)
	}
	if _, err := os.Stat(ck3.Path()); err != nil {
		t.Fatalf("pinned checkpoint pruned within --pin-retention: %v", err)
	}
	// Once the pin is older than the retention, the next save prunes it
	// and its marker.
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(ck3.Path()+pinSuffix, old, old); err != nil {
		t.Fatal(err)
	}
	trainStep(t, tr)
	publishCheckpoint(t, tr)
	for _, p := range []string{ck3.Path(), ck3.Path() + pinSuffix} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s kept after its pin lapsed", filepath.Base(p))
		}
	}
}

// The reward is the predicted effect unless λ is set, and then it is
// penalised by the members' disagreement only, never by the predicted
// noise of one member.
func TestRewardIsTheEffectUnlessLambda(t *testing.T) {
	t.Parallel()
	one := [][]Prediction{{{Mean: 0.3, Std: 0.2}}}
	if s := aggregate(one, 1, 0)[0]; s.Reward != 0.3 || s.ModelStd != 0 || s.Std != 0.2 {
		t.Errorf("one member, λ 0: reward %v, model_std %v, std %v; want 0.3, 0, 0.2", s.Reward, s.ModelStd, s.Std)
	}
	if s := aggregate(one, 1, 2)[0]; s.Reward != 0.3 {
		t.Errorf("one member, λ 2: reward %v; the std of one member is noise, not the model's uncertainty: want 0.3", s.Reward)
	}
	two := [][]Prediction{{{Mean: 0.1, Std: 0.2}}, {{Mean: 0.3, Std: 0.2}}}
	s := aggregate(two, 1, 2)[0]
	if math.Abs(s.ModelStd-0.1) > 1e-12 || math.Abs(s.Reward-(0.2-2*0.1)) > 1e-12 || math.Abs(s.Std-math.Sqrt(0.04+0.01)) > 1e-12 {
		t.Errorf("two members 0.1, 0.3, λ 2: model_std %v reward %v std %v; want 0.1, 0, √0.05", s.ModelStd, s.Reward, s.Std)
	}
}

// Answers name the feature set of the model that gave them.
func TestAnswersNameTheFeatureSet(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	publishCheckpoint(t, tr)
	s := scoreAt(t, srv.Client(), srv.URL, "")
	if s.Features != FeatureSet(tr.models[0].Config()) || !strings.HasPrefix(s.Features, "additive(rank") {
		t.Fatalf("features %q, want the served model's %q", s.Features, FeatureSet(tr.models[0].Config()))
	}
	if r := rewardsAt(t, srv.Client(), srv.URL, ""); r.Features != s.Features {
		t.Fatalf("/v1/rewards names features %q, /v1/score %q", r.Features, s.Features)
	}
}

// At most MaxPinnedKept pinned checkpoints are kept beyond --checkpoint-keep:
// a client pinning every version cannot fill the disk.
func TestPinnedCheckpointsAreBounded(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Name: "b", CheckpointKeep: 1, PinRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var pinned []*Checkpoint
	for range MaxPinnedKept + 3 {
		trainStep(t, tr)
		ck := publishCheckpoint(t, tr)
		if err := tr.store.Pin(ck.Index); err != nil {
			t.Fatal(err)
		}
		pinned = append(pinned, ck)
	}
	trainStep(t, tr)
	publishCheckpoint(t, tr)
	kept := 0
	for i, ck := range pinned {
		_, err := os.Stat(ck.Path())
		if err == nil {
			kept++
		}
		if newest := i >= len(pinned)-MaxPinnedKept; newest != (err == nil) {
			t.Errorf("pinned checkpoint %d of %d: kept %v, want %v (the newest %d pinned stay)", i+1, len(pinned), err == nil, newest, MaxPinnedKept)
		}
	}
	if kept != MaxPinnedKept {
		t.Fatalf("%d pinned checkpoints kept, want %d", kept, MaxPinnedKept)
	}
}
