package stack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

// otlpTraceJSON is an OTLP/JSON export of one trace: three invoke_agent
// spans (three attempts of cell otlp-e2e) and a load_skill child of the
// first, as an OpenTelemetry SDK sends it to /v1/traces.
const otlpTraceJSON = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"agent"}}]},
 "scopeSpans":[{"scope":{"name":"agent"},"spans":[
  {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119200000000000","endTimeUnixNano":"1796119201000000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},
    {"key":"harnessflow.cell_id","value":{"stringValue":"otlp-e2e"}},{"key":"harnessflow.task_id","value":{"stringValue":"t1"}},
    {"key":"harnessflow.skills_available","value":{"intValue":"2"}},
    {"key":"harnessflow.score","value":{"doubleValue":1}},{"key":"harnessflow.success","value":{"boolValue":true}}]},
  {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b175","parentSpanId":"eee19b7ec3c1b174","name":"execute_tool load_skill pdf","kind":1,
   "startTimeUnixNano":"1796119200100000000","endTimeUnixNano":"1796119200200000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"load_skill"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"pdf"}},{"key":"harnessflow.turn","value":{"intValue":"1"}}]},
  {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b176","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119202000000000","endTimeUnixNano":"1796119203000000000","status":{"code":2},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},
    {"key":"harnessflow.cell_id","value":{"stringValue":"otlp-e2e"}},{"key":"harnessflow.task_id","value":{"stringValue":"t2"}},
    {"key":"harnessflow.score","value":{"doubleValue":0}},{"key":"harnessflow.success","value":{"boolValue":false}}]},
  {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b177","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119204000000000","endTimeUnixNano":"1796119205000000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},
    {"key":"harnessflow.cell_id","value":{"stringValue":"otlp-e2e"}},{"key":"harnessflow.task_id","value":{"stringValue":"t3"}},
    {"key":"harnessflow.score","value":{"doubleValue":0.5}},{"key":"harnessflow.success","value":{"boolValue":false}}]}
 ]}]}]}`

// TestUpOTLPTraceReachesClickHouse posts an OTLP/JSON trace to the running
// stack's /v1/traces, twice (an exporter's retry), and finds its three
// invoke_agent spans as three task attempts and its load_skill span as one
// skill event in ClickHouse: the retry deduplicated by the span-derived
// event ids.
func TestUpOTLPTraceReachesClickHouse(t *testing.T) {
	s, _ := startStack(t, t.TempDir())
	ep := s.Endpoints()
	conn := s.ClickHouseConn()
	ctx, cancel := testenv.Context(t)
	defer cancel()
	scalar := func(q string) uint64 {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf(q, ep.Database)).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	const (
		attempts  = "SELECT count() FROM %s.task_attempts FINAL WHERE cell_id = 'otlp-e2e'"
		skills    = "SELECT count() FROM %s.skill_events FINAL WHERE cell_id = 'otlp-e2e'"
		attemptAt = "SELECT toUInt64(max(_offset)) FROM %s.task_attempts WHERE cell_id = 'otlp-e2e'"
		skillAt   = "SELECT toUInt64(max(_offset)) FROM %s.skill_events WHERE cell_id = 'otlp-e2e'"
	)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testenv.WaitFor(t, waitBudget(ctx), "ClickHouse: "+what, func() (bool, string) {
			return cond(), fmt.Sprintf("%d attempts, %d skill events of cell otlp-e2e", scalar(attempts), scalar(skills))
		})
	}

	postOTLP(t, ep)
	waitFor("3 attempts and 1 skill event", func() bool { return scalar(attempts) >= 3 && scalar(skills) >= 1 })
	if a, k := scalar(attempts), scalar(skills); a != 3 || k != 1 {
		t.Fatalf("ClickHouse holds %d attempts and %d skill events of cell otlp-e2e, want 3 and 1", a, k)
	}

	// The exporter retries the same export: new Kafka messages (the sink
	// stores them: the offsets grow; every event of the cell is on one
	// partition), the same event ids, so still 3 and 1.
	a0, k0 := scalar(attemptAt), scalar(skillAt)
	postOTLP(t, ep)
	waitFor("the retried export's arrival", func() bool { return scalar(attemptAt) >= a0+3 && scalar(skillAt) >= k0+1 })
	if a, k := scalar(attempts), scalar(skills); a != 3 || k != 1 {
		t.Fatalf("after a retried export ClickHouse holds %d attempts and %d skill events of cell otlp-e2e, want 3 and 1", a, k)
	}

	var status string
	var loaded []string
	q := fmt.Sprintf("SELECT status, skills_loaded FROM %s.task_attempts FINAL WHERE cell_id = 'otlp-e2e' AND task_id = 't1'", ep.Database)
	if err := conn.QueryRow(ctx, q).Scan(&status, &loaded); err != nil {
		t.Fatal(err)
	}
	if status != "ok" || !slices.Equal(loaded, []string{"pdf"}) {
		t.Errorf("attempt t1: status %q, skills_loaded %v, want ok [pdf]", status, loaded)
	}
	var task, tool, name, skillStatus string
	var attempt, turn int32
	q = fmt.Sprintf("SELECT task_id, attempt, turn, tool, skill_name, status FROM %s.skill_events FINAL WHERE cell_id = 'otlp-e2e'", ep.Database)
	if err := conn.QueryRow(ctx, q).Scan(&task, &attempt, &turn, &tool, &name, &skillStatus); err != nil {
		t.Fatal(err)
	}
	if task != "t1" || attempt != 1 || turn != 1 || tool != "load_skill" || name != "pdf" || skillStatus != "loaded" {
		t.Errorf("skill event %s/%d turn %d %s %s %s, want t1/1 turn 1 load_skill pdf loaded", task, attempt, turn, tool, name, skillStatus)
	}
}

// postOTLP posts otlpTraceJSON to the stack's /v1/traces with its token and
// expects a full success (200, no partial success).
func postOTLP(t *testing.T, ep Endpoints) {
	t.Helper()
	postOTLPBody(t, ep, otlpTraceJSON)
}

// postOTLPBody posts an OTLP/JSON body to the stack's /v1/traces with its
// token and expects a full success (200, no partial success).
func postOTLPBody(t *testing.T, ep Endpoints, body string) {
	t.Helper()
	// otlp_url is the gateway's /v1/traces, beside ingest_url's /v1/events.
	url := ep.OTLPURL
	if want := strings.TrimSuffix(ep.IngestURL, "/v1/events") + "/v1/traces"; url != want {
		t.Fatalf("otlp_url %q, want %q (beside ingest_url %q)", url, want, ep.IngestURL)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+ep.IngestToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(bytes.TrimSpace(b)) != "{}" {
		t.Fatalf("POST /v1/traces: %d %s, want 200 {} (no partial success)", resp.StatusCode, b)
	}
}

// otlpAloneJSON is a spans-only agent's export, as an OpenTelemetry SDK
// sends it: the cell's attributes on the resource, no cell_started on
// /v1/events. The cell span (trace 1) wraps two attempts (tasks t1, with a
// load_skill child, and t2) and ends the cell; final is left out.
const otlpAloneJSON = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"agent"}},
  {"key":"harnessflow.campaign_id","value":{"stringValue":"camp-alone"}},{"key":"harnessflow.cell_id","value":{"stringValue":"otlp-alone"}},
  {"key":"harnessflow.benchmark","value":{"stringValue":"swe"}},{"key":"harnessflow.agent_model","value":{"stringValue":"solo"}},
  {"key":"harnessflow.route","value":{"stringValue":"baseline"}},{"key":"harnessflow.seed","value":{"intValue":"3"}}]},
 "scopeSpans":[{"scope":{"name":"agent"},"spans":[
  {"traceId":"6b8efff798038103d269b633813fc60c","spanId":"aee19b7ec3c1b175","parentSpanId":"aee19b7ec3c1b174","name":"execute_tool load_skill pdf","kind":1,
   "startTimeUnixNano":"1796119200100000000","endTimeUnixNano":"1796119200200000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"load_skill"}},
    {"key":"gen_ai.skill.name","value":{"stringValue":"pdf"}},{"key":"harnessflow.turn","value":{"intValue":"1"}}]},
  {"traceId":"6b8efff798038103d269b633813fc60c","spanId":"aee19b7ec3c1b174","parentSpanId":"aee19b7ec3c1b170","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119200000000000","endTimeUnixNano":"1796119201000000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},{"key":"harnessflow.task_id","value":{"stringValue":"t1"}},
    {"key":"harnessflow.skills_available","value":{"intValue":"2"}},
    {"key":"harnessflow.score","value":{"doubleValue":1}},{"key":"harnessflow.success","value":{"boolValue":true}}]},
  {"traceId":"6b8efff798038103d269b633813fc60c","spanId":"aee19b7ec3c1b176","parentSpanId":"aee19b7ec3c1b170","name":"invoke_agent solver","kind":1,
   "startTimeUnixNano":"1796119202000000000","endTimeUnixNano":"1796119203000000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},{"key":"harnessflow.task_id","value":{"stringValue":"t2"}},
    {"key":"harnessflow.score","value":{"doubleValue":0}},{"key":"harnessflow.success","value":{"boolValue":false}}]},
  {"traceId":"6b8efff798038103d269b633813fc60c","spanId":"aee19b7ec3c1b170","name":"cell run","kind":1,
   "startTimeUnixNano":"1796119199900000000","endTimeUnixNano":"1796119204000000000",
   "attributes":[{"key":"harnessflow.cell_status","value":{"stringValue":"completed"}},{"key":"harnessflow.cell_attempts","value":{"intValue":"2"}}]}
 ]}]}]}`

// TestUpOTLPSpansOnlyCellReachesViews posts a spans-only agent's export
// (the cell's attributes on the resource, no cell_started on /v1/events),
// twice: its cell reaches the views (v_cell_scores with both tasks,
// pass_rate_final from the omitted final, true; v_skill_activation), the
// processors admit it (round_metrics), nothing is dead-lettered, and the
// cells table holds one start and one finish.
func TestUpOTLPSpansOnlyCellReachesViews(t *testing.T) {
	s, _ := startStack(t, t.TempDir())
	ep := s.Endpoints()
	conn := s.ClickHouseConn()
	ctx, cancel := testenv.Context(t)
	defer cancel()
	scalar := func(q string) uint64 {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf(q, ep.Database)).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	for range 2 {
		postOTLPBody(t, ep, otlpAloneJSON)
	}
	const (
		scored   = "SELECT count() FROM %s.v_cell_scores WHERE cell_id = 'otlp-alone'"
		rounds   = "SELECT count() FROM %s.round_metrics FINAL WHERE cell_id = 'otlp-alone'"
		skills   = "SELECT count() FROM %s.v_skill_activation WHERE campaign_id = 'camp-alone'"
		rejected = "SELECT count() FROM %s.rejected_events FINAL WHERE position(message, 'otlp-alone') > 0"
		starts   = "SELECT countIf(kind = 'started') * 10 + countIf(kind = 'finished') FROM %s.cells FINAL WHERE cell_id = 'otlp-alone'"
	)
	testenv.WaitFor(t, waitBudget(ctx), "the spans-only cell in the views", func() (bool, string) {
		return scalar(scored) > 0 && scalar(rounds) > 0 && scalar(skills) > 0,
			fmt.Sprintf("v_cell_scores %d, round_metrics %d, v_skill_activation %d rows; %d dead letters",
				scalar(scored), scalar(rounds), scalar(skills), scalar(rejected))
	})
	var campaign, route string
	var n uint64
	var pass, passFinal float64
	q := fmt.Sprintf("SELECT campaign_id, route, n_tasks, pass_rate, pass_rate_final FROM %s.v_cell_scores WHERE cell_id = 'otlp-alone'", ep.Database)
	if err := conn.QueryRow(ctx, q).Scan(&campaign, &route, &n, &pass, &passFinal); err != nil {
		t.Fatal(err)
	}
	if campaign != "camp-alone" || route != "baseline" || n != 2 || pass != 50 || passFinal != 50 {
		t.Errorf("v_cell_scores: campaign %q route %q, %d tasks, pass_rate %v, pass_rate_final %v; want camp-alone baseline, 2, 50, 50",
			campaign, route, n, pass, passFinal)
	}
	if c := scalar(starts); c != 11 {
		t.Errorf("cells: %d started and %d finished rows, want 1 and 1", c/10, c%10)
	}
	if r := scalar(rejected); r != 0 {
		t.Errorf("%d dead letters of the spans-only cell, want none", r)
	}
}

// waitBudget is how long a wait may take: until 15 s before ctx's
// deadline (so the failure can still say what ClickHouse holds), or 3
// minutes without one.
func waitBudget(ctx context.Context) time.Duration {
	if at, ok := ctx.Deadline(); ok {
		return max(time.Until(at)-15*time.Second, time.Second)
	}
	return 3 * time.Minute
}
