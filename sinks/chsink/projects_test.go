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
	waitFor(t, 60*time.Second, "the sink to insert every message", func() (bool, string) {
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
