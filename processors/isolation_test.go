package processors

import (
	"bytes"
	"sort"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestProjectsIsolated: two projects (two tokens; one of them the default
// project, whose ids are derived without a project part) run campaigns with the same
// campaign id, hence the same cell ids, update ids and even the same explicit
// event ids; the second project's cell_started of every cell comes first.
// Through both stages each project derives exactly what it derives alone:
// the same samples and round metrics, byte for byte, and no dead letter.
// Before cells were keyed by (project, cell id), the first project's
// cell_started was dropped as a duplicate of the other's and its attempts
// were counted in the other project's cell.
func TestProjectsIsolated(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	acme := gen.Generate(gen.Config{Seed: 17, Project: schemas.DefaultProject, Campaign: "camp", Start: start.Add(time.Millisecond)})
	evil := gen.Generate(gen.Config{Seed: 18, Project: "evil", Campaign: "camp", Start: start})
	shared := 0
	cellsOf := map[string]bool{}
	for _, r := range acme.Records {
		if st, ok := r.Event.(*schemas.CellStarted); ok {
			cellsOf[st.CellID] = true
		}
	}
	for _, r := range evil.Records {
		if st, ok := r.Event.(*schemas.CellStarted); ok && cellsOf[st.CellID] {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("the two campaigns share no cell id: the test tests nothing")
	}

	now := time.Now()
	alone := func(c *gen.Campaign) map[derivedKey][]byte {
		return derivedSet(t, feedAll(newLocal(t, Config{MinPairs: 2}), encodeRecords(t, c), now))
	}
	wantAcme, wantEvil := alone(acme), alone(evil)
	if len(wantAcme) == 0 || len(wantEvil) == 0 {
		t.Fatalf("alone: acme derived %d, evil %d events", len(wantAcme), len(wantEvil))
	}

	// Both projects' records in time order (evil's first at a tie).
	mixed := append(encodeRecords(t, evil), encodeRecords(t, acme)...)
	sort.SliceStable(mixed, func(i, j int) bool { return mixed[i].msg.Time.Before(mixed[j].msg.Time) })
	got := derivedSet(t, feedAll(newLocal(t, Config{MinPairs: 2}), mixed, now))

	for _, p := range []struct {
		name string
		want map[derivedKey][]byte
	}{{schemas.DefaultProject, wantAcme}, {"evil", wantEvil}} {
		n := 0
		for k, v := range got {
			if k.project != p.name {
				continue
			}
			n++
			if w, ok := p.want[k]; !ok {
				t.Errorf("%s: derived %s that it does not derive alone", p.name, k.id)
			} else if !bytes.Equal(w, v) {
				t.Errorf("%s: %s differs from what the project derives alone", p.name, k.id)
			}
		}
		if n != len(p.want) {
			t.Errorf("%s: %d derived events with the other project, %d alone", p.name, n, len(p.want))
		}
	}
	for k := range got {
		if k.project != schemas.DefaultProject && k.project != "evil" {
			t.Errorf("derived %s of project %q", k.id, k.project)
		}
	}
}

type derivedKey struct{ project, id string }

// derivedSet keys feedAll's outputs by the project of the derived event (a
// dead letter counts as its own) and topic/event id; it fails on a dead letter.
func derivedSet(t *testing.T, set map[string][]byte) map[derivedKey][]byte {
	t.Helper()
	out := map[derivedKey][]byte{}
	for id, v := range set {
		ev, err := schemas.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := ev.(*schemas.Rejected); ok {
			t.Errorf("dead letter: %s %s", r.ReasonCode, r.Message)
			continue
		}
		out[derivedKey{ev.Header().Project, id}] = v
	}
	return out
}
