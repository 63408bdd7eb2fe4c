// Package eval is an honest offline evaluation of the trainer's critic:
// held-out rows split by group (never by sample), trivial baselines fitted on
// the training side and scored on the same held-out rows, metrics with
// bootstrap confidence intervals that resample groups, and a verdict that
// says "beats baselines" only when the interval of the paired difference
// excludes zero. It imports trainer; trainer must not import it.
package eval

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
)

// GroupKey names what a group is: the unit that Split keeps on one side and
// that the bootstrap resamples.
type GroupKey string

const (
	// ByCampaign groups by campaign id: the coarsest grouping.
	ByCampaign GroupKey = "campaign"
	// ByCampaignSeed groups by (campaign id, seed). In the simulator every
	// cell of one (campaign, seed) sees the same task stream per benchmark,
	// so the sibling samples of one round (the cells' updates of that round)
	// share their tasks and baseline: this key keeps them together.
	ByCampaignSeed GroupKey = "campaign+seed"
	// ByCell groups by cell id. Cells of one (campaign, seed) share tasks, so
	// this key does NOT keep a round's siblings together; it isolates only a
	// cell's own rounds from each other.
	ByCell GroupKey = "cell"
)

// DefaultGroupKey is the key used when none is given.
const DefaultGroupKey = ByCampaignSeed

// ParseGroupKey parses "campaign", "campaign+seed" or "cell"; "" is the
// default (campaign+seed).
func ParseGroupKey(s string) (GroupKey, error) {
	switch k := GroupKey(s); k {
	case "":
		return DefaultGroupKey, nil
	case ByCampaign, ByCampaignSeed, ByCell:
		return k, nil
	}
	return "", fmt.Errorf("%w: group key %q: want campaign, campaign+seed or cell", ErrConfig, s)
}

// Of returns s's group under k. A sample whose key fields are empty falls
// back to its cell id, then its sample id, so that a sample without a
// campaign is never pooled with every other such sample by accident:
// campaign → "campaign:<id>" (else "cell:<cell>"), campaign+seed →
// "campaign:<id>/seed:<n>" (else "cell:<cell>"), cell → "cell:<cell>"; with no
// cell either, "sample:<id>". The group of a sample of a project other than
// the default one (schemas.DefaultProject) or none starts with
// `project:"<project>"/` (Go-quoted): two projects' equal ids are two
// groups (trainer.GroupOf names groups alike).
func (k GroupKey) Of(s *schemas.LabeledSample) string {
	g := k.of(s)
	if s.Project == "" || s.Project == schemas.DefaultProject {
		return g
	}
	return "project:" + strconv.Quote(s.Project) + "/" + g
}

func (k GroupKey) of(s *schemas.LabeledSample) string {
	switch k {
	case ByCampaign:
		if s.CampaignID != "" {
			return "campaign:" + s.CampaignID
		}
	case ByCampaignSeed, "":
		if s.CampaignID != "" {
			return "campaign:" + s.CampaignID + "/seed:" + strconv.Itoa(int(s.Seed))
		}
	}
	if s.CellID != "" {
		return "cell:" + s.CellID
	}
	return "sample:" + s.SampleID
}

// heldOutGroup reports whether group falls in the held-out fraction for
// seed: u = mix(FNV-1a 64 of group XOR mix(seed)), where mix is splitmix64's
// finalizer (FNV alone mixes a small change of the seed too weakly), reduced
// to [0, 1) with 2^-53 resolution; held out when u < fraction.
func heldOutGroup(group string, fraction float64, seed uint64) bool {
	h := fnv.New64a()
	h.Write([]byte(group))
	u := float64(mix64(h.Sum64()^mix64(seed))>>11) / (1 << 53)
	return u < fraction
}

// mix64 is splitmix64's output function.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Split divides samples into a training and a held-out side by hashing each
// sample's group (key.Of) with seed: every sample of a group falls on the
// same side, and the same (samples, key, fraction, seed) always gives the
// same split, in input order. About heldoutFraction of the groups are held
// out; the fraction of samples is near it only when there are many groups of
// similar size. heldoutFraction must be in [0, 1].
func Split(samples []*schemas.LabeledSample, key GroupKey, heldoutFraction float64, seed uint64) (train, heldout []*schemas.LabeledSample, err error) {
	if _, err := ParseGroupKey(string(key)); err != nil {
		return nil, nil, err
	}
	if !(heldoutFraction >= 0 && heldoutFraction <= 1) {
		return nil, nil, fmt.Errorf("%w: held-out fraction %v: want [0, 1]", ErrConfig, heldoutFraction)
	}
	memo := map[string]bool{}
	for _, s := range samples {
		g := key.Of(s)
		held, ok := memo[g]
		if !ok {
			held = heldOutGroup(g, heldoutFraction, seed)
			memo[g] = held
		}
		if held {
			heldout = append(heldout, s)
		} else {
			train = append(train, s)
		}
	}
	return train, heldout, nil
}

// Clean returns the samples the trainer would train on (a non-empty sample
// id, a known label, a finite effect in [-1, 1]) and how many it dropped.
func Clean(samples []*schemas.LabeledSample) (ok []*schemas.LabeledSample, dropped int) {
	for _, s := range samples {
		if s == nil || s.SampleID == "" || trainer.LabelIndex(s.Label) < 0 ||
			math.IsNaN(s.Effect) || s.Effect < -1 || s.Effect > 1 {
			dropped++
			continue
		}
		ok = append(ok, s)
	}
	return ok, dropped
}
