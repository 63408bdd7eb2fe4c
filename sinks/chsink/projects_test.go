package chsink_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// asProject returns copies of the project events of evs moved to project,
// with their event ids, cell ids and update ids kept; every attempt's
// outcome is turned around so that the copy's figures differ.
func asProject(t *testing.T, evs []schemas.Event, project string) []schemas.Event {
	t.Helper()
	var out []schemas.Event
	for _, ev := range evs {
		switch ev.Type() {
		case schemas.TypeRejected, schemas.TypeCheckpointPublished:
			continue // no project's
		}
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		c, err := schemas.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		c.Header().Project = project
		if a, ok := c.(*schemas.TaskAttempt); ok {
			a.Success, a.Score = !a.Success, 1-a.Score
		}
		out = append(out, c)
	}
	return out
}

// projectState is every view's rows and every event table's deduplicated row
// count of one project.
func projectState(t *testing.T, conn driver.Conn, project string) map[string]string {
	t.Helper()
	out := map[string]string{}
	where := " WHERE project = '" + project + "'"
	for _, v := range viewNames {
		_, rows, err := chx.QueryStrings(context.Background(), conn, "SELECT * FROM "+v+where)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		lines := make([]string, len(rows))
		for i, r := range rows {
			lines[i] = strings.Join(r, "|")
		}
		sort.Strings(lines)
		out[v] = strings.Join(lines, "\n")
	}
	for _, tb := range eventTables {
		n, err := count(conn, "SELECT count() FROM "+tb+" FINAL"+where)
		if err != nil {
			t.Fatal(err)
		}
		out[tb] = fmt.Sprint(n)
	}
	n, err := count(conn, "SELECT count() FROM cell_scores FINAL"+where)
	if err != nil {
		t.Fatal(err)
	}
	out["cell_scores"] = fmt.Sprint(n)
	return out
}

// sinkAll writes evs to a fresh broker and database through a sink and
// returns the database.
func sinkAll(t *testing.T, evs []schemas.Event) *testenv.CH {
	t.Helper()
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	produce(t, brokers, evs)
	s, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "g1",
		MaxAge: 100 * time.Millisecond})
	testenv.WaitFor(t, 60*time.Second, "the sink to insert every message", func() (bool, string) {
		st := s.Stats()
		return st.Rows >= int64(len(evs)), fmt.Sprintf("%+v of %d", st, len(evs))
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestSinkKeepsTwoProjectsOnOneCellIDApart: project q sends the same
// campaign as project p (same campaign, cell, update and event ids) with
// other outcomes. Through the sink, in one database, every view, table and
// cell_scores summary of each project is what that project alone gives.
// Before the project led the sort keys, q's rows replaced p's (same sort
// key), and the views and summaries mixed the two projects' cells.
func TestSinkKeepsTwoProjectsOnOneCellIDApart(t *testing.T) {
	p := campaignEvents()
	q := asProject(t, p, "q")
	alone := map[string]map[string]string{
		"p": projectState(t, sinkAll(t, p).Conn, "p"),
		"q": projectState(t, sinkAll(t, q).Conn, "q"),
	}
	if alone["p"]["v_cell_scores"] == alone["q"]["v_cell_scores"] {
		t.Fatal("the two projects' figures are the same: the test tests nothing")
	}
	both := sinkAll(t, append(append([]schemas.Event{}, q...), p...))
	assertSummariesLive(t, both.Conn)
	for _, project := range []string{"p", "q"} {
		got := projectState(t, both.Conn, project)
		for k, want := range alone[project] {
			if got[k] != want {
				t.Errorf("project %s beside the other, %s:\n%s\nalone:\n%s", project, k, got[k], want)
			}
		}
	}
}

// TestSinkKeepsDeadLettersAndTheTrainersCheckpointPerProject: projA's dead
// letter with the event id of projB's, sent later, and a
// checkpoint_published in projA's name with the trainer's source, model
// version and event id, sent after the trainer's, leave both of each in
// their tables (FINAL): projB's dead letter and the trainer's checkpoint
// row (project "") keep their contents. Before migration 0007 keyed
// rejected_events by (project, event_id) and checkpoints by (project,
// source, model_version, event_id), the later row replaced the other.
func TestSinkKeepsDeadLettersAndTheTrainersCheckpointPerProject(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	dead := func(project, msg string) *schemas.Rejected {
		r := schemas.NewRejected("processor", schemas.StageReference, "unknown_cell", msg,
			schemas.Origin{Project: project, Topic: schemas.TopicAttempts, Partition: 1, Offset: 7, Time: at}, 0)
		r.EventID = "dlq:" + schemas.TopicAttempts + ":1:7" // the same id for both, as a forgery would have it
		return r
	}
	ckpt := func(project string, acc float64) *schemas.CheckpointPublished {
		return &schemas.CheckpointPublished{Envelope: schemas.Envelope{EventID: "checkpoint:t-v1", EventTime: at, Project: project, Source: "trainer:t"},
			ModelVersion: "t-v1", Step: 3, SamplesTrained: 24, Metrics: map[string]float64{"heldout_acc": acc}}
	}
	ch := sinkAll(t, []schemas.Event{dead("projB", "projB's attempt"), dead("projA", "forged"), ckpt("", 0.5), ckpt("projA", 0.99)})
	_, rows, err := chx.QueryStrings(context.Background(), ch.Conn, "SELECT project, message FROM rejected_events FINAL ORDER BY project")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "[[projA forged] [projB projB's attempt]]" {
		t.Errorf("rejected_events FINAL: %v, want projA's and projB's dead letters", rows)
	}
	_, rows, err = chx.QueryStrings(context.Background(), ch.Conn, "SELECT toString(metric_value) FROM checkpoints FINAL WHERE project = '' AND source = 'trainer:t'")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "[[[0.5]]]" {
		t.Errorf("the trainer's checkpoint row: %v, want heldout_acc 0.5 (a tenant's row replaced it)", rows)
	}
}
