package trainer

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/harnessflow/harnessflow/schemas"
)

// Held-out split by group. The service holds out whole groups of samples,
// never single samples: the sibling samples of one simulated round (the
// cells' updates of that round, of one campaign and seed) share their tasks
// and baseline, so a per-sample split lets the model memorise a round from
// its training siblings and score it as if unseen. The key names, the group
// names and the hash are trainer/eval's (eval.GroupKey, eval.Split with seed
// 0), so `harnessflow critic-eval --group-key K --group-heldout-fraction F
// --split-seed 0` reproduces the service's split exactly (trainer/eval's
// service_test checks it) — except for the one group the service trains on
// although it hashes into the fraction because it came first (Trainer.holdOut,
// logged and kept in checkpoints as FirstGroup); trainer/eval imports
// trainer, not the reverse, which is why they are repeated here.

// Group keys of Config.HeldoutGroupKey (eval.ByCampaign, eval.ByCampaignSeed,
// eval.ByCell).
const (
	// GroupByCampaign holds out whole campaigns.
	GroupByCampaign = "campaign"
	// GroupByCampaignSeed holds out whole (campaign id, seed) groups: every
	// cell of one campaign and seed sees the same tasks, so a round's
	// siblings stay on one side. The default.
	GroupByCampaignSeed = "campaign+seed"
	// GroupByCell holds out whole cells (does NOT keep a round's siblings
	// together).
	GroupByCell = "cell"
)

// checkGroupKey reports whether key is a known group key.
func checkGroupKey(key string) error {
	switch key {
	case GroupByCampaign, GroupByCampaignSeed, GroupByCell:
		return nil
	}
	return fmt.Errorf("held-out group key %q: want campaign, campaign+seed or cell", key)
}

// GroupOf returns s's held-out group under key, as eval.GroupKey.Of names it:
// campaign → "campaign:<id>", campaign+seed (or "") → "campaign:<id>/seed:<n>",
// cell → "cell:<cell>"; a sample without a campaign falls back to
// "cell:<cell>", and without a cell either to "sample:<id>". A group is a
// project's: the name of a sample of any project but the default one (or
// none) starts with `project:"<project>"/` (Go-quoted), so that two
// projects' equal campaign, cell or sample ids are two groups and one
// tenant's samples never decide which side of the split another's fall on.
// The default project's names are the ones used before projects were
// part of them (as its derived event ids are, schemas.DeriveEventID), so a
// single-project deployment keeps its split and its checkpoints' FirstGroup.
func GroupOf(key string, s *schemas.LabeledSample) string {
	return projectGroup(s.Project, groupOf(key, s))
}

// projectGroup is group of project (see GroupOf).
func projectGroup(project, group string) string {
	if project == "" || project == schemas.DefaultProject {
		return group
	}
	return "project:" + strconv.Quote(project) + "/" + group
}

func groupOf(key string, s *schemas.LabeledSample) string {
	switch key {
	case GroupByCampaign:
		if s.CampaignID != "" {
			return "campaign:" + s.CampaignID
		}
	case GroupByCampaignSeed, "":
		if s.CampaignID != "" {
			return "campaign:" + s.CampaignID + "/seed:" + strconv.Itoa(int(s.Seed))
		}
	}
	if s.CellID != "" {
		return "cell:" + s.CellID
	}
	return "sample:" + s.SampleID
}

// IsHeldOutGroup reports whether group falls in the held-out fraction:
// u = splitmix64(FNV-1a 64 of group XOR splitmix64(0)) reduced to [0, 1)
// with 2^-53 resolution, held out when u < fraction (eval.Split's hash with
// seed 0). Stable across runs, restarts and processes.
func IsHeldOutGroup(group string, fraction float64) bool {
	if fraction <= 0 {
		return false
	}
	h := fnv.New64a()
	h.Write([]byte(group))
	u := float64(splitmix64(h.Sum64()^splitmix64(0))>>11) / (1 << 53)
	return u < fraction
}

// splitmix64 is splitmix64's output function.
func splitmix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
