package ingest_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/producers/producerstest"
)

// TestIDLessEventsOfTwoProjectsGetTwoIDs: the same event without an
// event_id or a project, sent by two tokens of two projects, is stored
// twice, each with its token's project and an id derived with it (issue
// 26 item 1: derived ids hash the project), so neither is taken for a
// duplicate of the other.
func TestIDLessEventsOfTwoProjectsGetTwoIDs(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	g := runGateway(t, ingest.Config{Brokers: []string{b.Addr()}})
	var obj map[string]any
	if err := json.Unmarshal([]byte(jsonOf(t, producerstest.TaskAttempt(1, ""))), &obj); err != nil {
		t.Fatal(err)
	}
	delete(obj, "event_id")
	delete(obj, "project")
	delete(obj, "source")
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw)
	for _, tok := range []string{"tok-a", "tok-b"} {
		if code, resp := g.post(tok, body); code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", tok, code, resp)
		}
	}
	stored := g.stored()
	if len(stored) != 2 {
		t.Fatalf("%d events stored, want 2", len(stored))
	}
	ids := map[string]string{}
	for _, s := range stored {
		h := s.Header()
		if h.EventID == "" {
			t.Fatalf("stored event of %s without an id", h.Project)
		}
		ids[h.Project] = h.EventID
	}
	if len(ids) != 2 || ids["projA"] == "" || ids["projB"] == "" || ids["projA"] == ids["projB"] {
		t.Fatalf("ids by project %v: want one per project, different", ids)
	}
}
