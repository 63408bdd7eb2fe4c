package processors

import (
	"testing"

	"github.com/harnessflow/harnessflow/processors/score"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestRefreshParamsFollowsDeclarations: a pairing key's labeling parameters
// follow its campaign's declaration when it arrives and each time it changes,
// however many events pass between the changes.
func TestRefreshParamsFollowsDeclarations(t *testing.T) {
	cfg := Config{MinPairs: 3}
	camps := newCampaignTable()
	s := newPairs(&cfg, nil, camps)
	ps := &pairState{key: "k", project: "p", campaign: "c1"}
	ps.p = score.NewPairer("", s.params(ps))
	var def score.Params
	def.SetDefaults()
	eps := func() float64 {
		for i := 0; i < 3; i++ { // as the events of a run would
			s.refreshParams(ps)
		}
		return ps.p.Params().Epsilon
	}
	if got := eps(); got != def.Epsilon {
		t.Fatalf("undeclared campaign: epsilon %v, want the default %v", got, def.Epsilon)
	}
	camps.put(&schemas.CampaignDeclared{Envelope: schemas.Envelope{Project: "p"}, CampaignID: "other", LabelEpsilon: 0.3, LabelAlpha: 0.01})
	if got := eps(); got != def.Epsilon {
		t.Fatalf("another campaign's declaration applied: epsilon %v", got)
	}
	camps.put(&schemas.CampaignDeclared{Envelope: schemas.Envelope{Project: "p"}, CampaignID: "c1", LabelEpsilon: 0.1, LabelAlpha: 0.01})
	if got := eps(); got != 0.1 {
		t.Fatalf("after the declaration: epsilon %v, want 0.1", got)
	}
	camps.put(&schemas.CampaignDeclared{Envelope: schemas.Envelope{Project: "p"}, CampaignID: "c1", LabelEpsilon: 0.05, LabelAlpha: 0.01})
	if got := eps(); got != 0.05 {
		t.Fatalf("after the declaration changed: epsilon %v, want 0.05", got)
	}
}
