package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

type gateway struct {
	t    *testing.T
	url  string
	addr string // broker
}

func startGateway(t *testing.T, maxBody int64) *gateway {
	t.Helper()
	b := testenv.Kafka(t)
	return runGateway(t, ingest.Config{Brokers: []string{b.Addr()}, MaxBody: maxBody})
}

// runGateway runs a gateway with cfg (Listen and TokensFile set here: tokens
// tok-a for projA, tok-b for projB) until the test ends, when Run must
// return nil.
func runGateway(t *testing.T, cfg ingest.Config, opts ...ingest.Option) *gateway {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# agents\ntok-a projA\n\n  tok-b\tprojB  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.TokensFile = "127.0.0.1:0", tokens
	srv, err := ingest.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready after 30s")
	}
	return &gateway{t: t, url: "http://" + srv.Addr(), addr: cfg.Brokers[0]}
}

func (g *gateway) post(token, body string) (int, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.url+"/v1/events", strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (g *gateway) stored() []schemas.Event {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []schemas.Event
	for _, topic := range schemas.RawTopics {
		msgs, err := producerstest.ReadTopic(ctx, g.addr, topic)
		if err != nil {
			g.t.Fatal(err)
		}
		for _, m := range msgs {
			ev, err := schemas.Decode(m.Value)
			if err != nil {
				g.t.Fatal(err)
			}
			out = append(out, ev)
		}
	}
	return out
}

func jsonOf(t *testing.T, ev schemas.Event) string {
	t.Helper()
	b, err := schemas.MarshalJSON(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestIngestAnswers(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 16<<10)
	one := producerstest.TaskAttempt(1, "")
	one.Source = ""
	single := jsonOf(t, one)

	// 401: no token, unknown token.
	if code, _ := g.post("", single); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, _ := g.post("tok-zzz", single); code != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d, want 401", code)
	}
	// 403: another project's event.
	if code, body := g.post("tok-b", single[:len(single)-1]+`,"project":"projA"}`); code != http.StatusForbidden {
		t.Fatalf("project mismatch: %d %s, want 403", code, body)
	}
	// 202, single object without project: the gateway fills it.
	if code, body := g.post("tok-a", single); code != http.StatusAccepted || string(body) != "{\"accepted\":1}\n" {
		t.Fatalf("single: %d %s, want 202 {\"accepted\":1}", code, body)
	}
	evs := g.stored()
	if len(evs) != 1 {
		t.Fatalf("%d events stored, want 1", len(evs))
	}
	if h := evs[0].Header(); h.Project != "projA" || h.Source != ingest.Source {
		t.Fatalf("envelope %+v: want project projA and source ingest", h)
	}

	// 202, array and NDJSON.
	arr := []string{jsonOf(t, producerstest.Event(schemas.TypeCellStarted, 2, "projA")),
		jsonOf(t, producerstest.Event(schemas.TypeSkillEvent, 3, "")),
		jsonOf(t, producerstest.Event(schemas.TypeHarnessUpdate, 4, "projA"))}
	if code, body := g.post("tok-a", "["+strings.Join(arr, ",")+"]"); code != http.StatusAccepted || string(body) != "{\"accepted\":3}\n" {
		t.Fatalf("array: %d %s", code, body)
	}
	nd := jsonOf(t, producerstest.Event(schemas.TypeCellFinished, 5, "projB")) + "\n" +
		jsonOf(t, producerstest.Event(schemas.TypeAdherenceJudgment, 6, "")) + "\n"
	if code, body := g.post("tok-b", nd); code != http.StatusAccepted || string(body) != "{\"accepted\":2}\n" {
		t.Fatalf("ndjson: %d %s", code, body)
	}
	if n := len(g.stored()); n != 6 {
		t.Fatalf("%d events stored, want 6", n)
	}

	// 400: one bad item among good ones; nothing of the request produced.
	bad := producerstest.TaskAttempt(8, "projA")
	bad.Status = "exploded"
	body := "[" + jsonOf(t, producerstest.TaskAttempt(7, "projA")) + "," + jsonOf(t, bad) + "," + jsonOf(t, producerstest.TaskAttempt(9, "")) + "]"
	code, resp := g.post("tok-a", body)
	if code != http.StatusBadRequest {
		t.Fatalf("invalid item: %d %s, want 400", code, resp)
	}
	var items []ingest.ItemError
	if err := json.Unmarshal(resp, &items); err != nil || len(items) != 1 || items[0].Index != 1 || !strings.Contains(items[0].Error, "status") {
		t.Fatalf("400 body %s (%v): want [{index:1, error about status}]", resp, err)
	}
	if code, resp := g.post("tok-a", `{"type":"task_attempt"`); code != http.StatusBadRequest || !bytes.Contains(resp, []byte(`"index":0`)) {
		t.Fatalf("malformed: %d %s, want 400 with index 0", code, resp)
	}
	// 413: body above the cap.
	big := make([]string, 0, 200)
	for i := 0; i < 200; i++ {
		big = append(big, jsonOf(t, producerstest.TaskAttempt(100+i, "projA")))
	}
	if code, _ := g.post("tok-a", strings.Join(big, "\n")); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("big body: %d, want 413", code)
	}
	if n := len(g.stored()); n != 6 {
		t.Fatalf("%d events stored after rejected requests, want still 6", n)
	}

	// /healthz and /metrics.
	resp2, err := http.Get(g.url + "/healthz")
	if err != nil || resp2.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp2, err)
	}
	resp2.Body.Close()
	resp2, err = http.Get(g.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	for _, want := range []string{
		`hf_ingest_requests_total{code="202"} 3`,
		`hf_ingest_requests_total{code="401"} 2`,
		`hf_ingest_events_total 6`,
		`hf_ingest_rejections_total{reason="unauthorized"} 2`,
		`hf_ingest_rejections_total{reason="forbidden"} 1`,
		`hf_ingest_rejections_total{reason="invalid"} 2`,
		`hf_ingest_rejections_total{reason="too_large"} 1`,
		`hf_ingest_request_duration_seconds_count 9`,
	} {
		if !strings.Contains(string(m), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestLoadTokensAndConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("# c\n\nt1 p1\nt2 p2\n"), 0o600)
	m, err := ingest.LoadTokens(good)
	if err != nil || len(m) != 2 || m["t1"] != "p1" || m["t2"] != "p2" {
		t.Fatalf("LoadTokens: %v %v", m, err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("t1 p1\nlonely\nt1 p3\n"), 0o600)
	_, err = ingest.LoadTokens(bad)
	if !errors.Is(err, ingest.ErrBadTokensFile) || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad file: %v, want errors on lines 2 and 3", err)
	}
	_, err = ingest.New(ingest.Config{})
	if !errors.Is(err, ingest.ErrNoTokens) || !strings.Contains(err.Error(), "brokers") {
		t.Fatalf("empty config: %v, want every problem", err)
	}
}

// TestDeliveryFailureAnswers: brokers that refuse every produce get a 503
// that says a resend is safe, with Retry-After; a client that gives up
// before the acknowledgement is counted as gone (499), not as a delivery
// failure of the brokers.
func TestDeliveryFailureAnswers(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	c := b.Cluster()
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return broker.ErrorResponse(r, kerr.NotEnoughReplicas.Code), nil, true
	})
	g := runGateway(t, ingest.Config{Brokers: []string{b.Addr()}, MaxBody: 1 << 20, DeliveryTimeout: 700 * time.Millisecond})
	url := g.url
	post := func(rctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, url+"/v1/events", strings.NewReader(jsonOf(t, producerstest.TaskAttempt(1, "projA"))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok-a")
		return http.DefaultClient.Do(req)
	}

	resp, err := post(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "resend the same request") {
		t.Fatalf("refused produce: %d, Retry-After %q, %s; want 503 saying a resend is safe", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	// A client that gives up first.
	rctx, rcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if resp, err := post(rctx); err == nil {
		resp.Body.Close()
		t.Fatalf("the client's 100ms request got an answer (%d) before the 700ms delivery timeout", resp.StatusCode)
	}
	rcancel()
	var text string
	testenv.Eventually(t, 30*time.Second, "the client that went away counted as 499 client_gone", func() bool {
		m, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(m.Body)
		m.Body.Close()
		text = string(b)
		return strings.Contains(text, `hf_ingest_requests_total{code="499"} 1`+"\n") &&
			strings.Contains(text, `hf_ingest_rejections_total{reason="client_gone"} 1`+"\n")
	})
	if !strings.Contains(text, `hf_ingest_rejections_total{reason="delivery"} 1`+"\n") {
		t.Fatalf("the client that went away was counted as a delivery failure too:\n%s", text)
	}
}

// TestBusyGatewayAnswersAtOnce: while requests holding the whole in-flight
// budget wait for slow brokers, a further request is answered 503 with
// Retry-After at once instead of piling up in memory; once they are
// acknowledged the budget is free again.
func TestBusyGatewayAnswersAtOnce(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	c := b.Cluster()
	held, release := make(chan struct{}, 1), make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case <-release:
			return nil, nil, false
		default:
		}
		select {
		case held <- struct{}{}:
		default:
		}
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	body := jsonOf(t, producerstest.TaskAttempt(1, "projA"))
	// Release the held produce before the gateway stops (cleanups run last
	// registered first), or its stop would wait on it.
	g := runGateway(t, ingest.Config{Brokers: []string{b.Addr()}, MaxBody: int64(len(body)) + 10, MaxInflight: int64(len(body)) + 10})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/events", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-held // the first request's events wait at the broker
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/events", strings.NewReader(jsonOf(t, producerstest.TaskAttempt(2, "projA"))))
	req.Header.Set("Authorization", "Bearer tok-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(msg), "busy") {
		t.Fatalf("request beyond the in-flight budget: %d, Retry-After %q, %s; want 503 busy", resp.StatusCode, resp.Header.Get("Retry-After"), msg)
	}
	once.Do(func() { close(release) })
	if code := <-first; code != http.StatusAccepted {
		t.Fatalf("the request in flight: %d, want 202", code)
	}
	if code, msg := g.post("tok-a", jsonOf(t, producerstest.TaskAttempt(3, "projA"))); code != http.StatusAccepted {
		t.Fatalf("after the budget freed: %d %s, want 202", code, msg)
	}
}
