package trainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// rewardItem is one (prompt, response, label) of a remote-RM batch.
type rewardItem struct{ prompt, response, label string }

var (
	evidenceA = "<|im_start|>user\nEvidence: task 12 failed: the agent forgot to run the tests before submitting.\n" +
		"task 13 passed.\nWrite an improved skill.<|im_end|>\n<|im_start|>assistant\n"
	evidenceB = "<|im_start|>user\nEvidence: task 7 timed out after 40 tool calls in a loop.\nWrite an improved prompt.<|im_end|>\n<|im_start|>assistant\n"
	itemA     = rewardItem{evidenceA, "Always run the full test suite and read its output before you submit.<|im_end|>",
		`{"kind":"skill","evolver":"qwen-7b","agent":"gpt-4o-mini","benchmark":"swe-lite"}`}
	itemB = rewardItem{evidenceB, "Stop after three identical tool calls and re-plan.<|im_end|>", "42"}
)

// postRewards posts body to url as OpenRLHF's remote-RM client does (a
// JSON body, Content-Type: application/json) with an optional
// Authorization header, and returns the status and the body.
func postRewards(t *testing.T, c *http.Client, url, auth string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// openRLHFBatch is the body OpenRLHF posts: query = the decoded prompt and
// response tokens (prompt then response), prompts, labels.
func openRLHFBatch(t testing.TB, items ...rewardItem) []byte {
	t.Helper()
	body := map[string][]string{"query": {}, "prompts": {}, "labels": {}}
	for _, it := range items {
		body["query"] = append(body["query"], it.prompt+it.response)
		body["prompts"] = append(body["prompts"], it.prompt)
		body["labels"] = append(body["labels"], it.label)
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rewardsOf reads the answer as the RL trainers do: the JSON object's
// "rewards" list (other keys ignored).
func rewardsOf(t *testing.T, code int, body []byte) []float64 {
	t.Helper()
	if code != http.StatusOK {
		t.Fatalf("rewards = %d %s, want 200", code, body)
	}
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	var r []float64
	if err := json.Unmarshal(resp["rewards"], &r); err != nil {
		t.Fatalf("answer %s: rewards: %v", body, err)
	}
	return r
}

// post posts body as postRewards does and reads its rewards (200 only).
func post(t *testing.T, c *http.Client, url string, body []byte) []float64 {
	t.Helper()
	code, b := postRewards(t, c, url, "", body)
	return rewardsOf(t, code, b)
}

// scoreOf returns /v1/score's reward for one candidate update.
func scoreOf(t *testing.T, c *http.Client, url string, in Input) Score {
	t.Helper()
	b, _ := json.Marshal(in)
	code, body := postRewards(t, c, url+"/v1/score", "", b)
	if code != http.StatusOK {
		t.Fatalf("score %s = %d %s", b, code, body)
	}
	var s Score
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(a)) }

// TestRewardsOpenRLHFProtocol: a batch posted as OpenRLHF posts it gets one
// reward per query in the request's order, each equal to /v1/score's
// reward for the prompt as the evidence (query) and the response as the
// update, with the label object's kind, evolver, agent and benchmark;
// LightRFT's "queries" spelling gives the same rewards; the answer names
// the model version.
func TestRewardsOpenRLHFProtocol(t *testing.T) {
	t.Parallel()
	tr, err := httpTrainer(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	c := srv.Client()
	url := srv.URL + "/v1/rewards"

	code, body := postRewards(t, c, url, "", openRLHFBatch(t, itemA, itemB, itemA))
	ab := rewardsOf(t, code, body)
	if len(ab) != 3 {
		t.Fatalf("rewards %v for 3 queries", ab)
	}
	if ab[0] != ab[2] {
		t.Fatalf("the same item twice got %v and %v", ab[0], ab[2])
	}
	if ab[0] == ab[1] {
		t.Fatalf("two different items got the same reward %v: the order test below would prove nothing", ab[0])
	}
	ba := post(t, c, url, openRLHFBatch(t, itemB, itemA))
	if len(ba) != 2 || !near(ba[0], ab[1]) || !near(ba[1], ab[0]) {
		t.Fatalf("swapped batch got %v, want [%v %v]", ba, ab[1], ab[0])
	}

	var full Rewards
	if err := json.Unmarshal(body, &full); err != nil {
		t.Fatal(err)
	}
	if full.ModelVersion == "" || full.ModelVersion != tr.modelVersion || len(full.Effects) != 3 || len(full.Unsplit) != 0 {
		t.Fatalf("answer %s: want model_version %q, 3 effects, nothing unsplit", body, tr.modelVersion)
	}

	sa := scoreOf(t, c, srv.URL, Input{Update: itemA.response, Query: itemA.prompt, Kind: "skill", Evolver: "qwen-7b",
		Agent: "gpt-4o-mini", Benchmark: "swe-lite"})
	sb := scoreOf(t, c, srv.URL, Input{Update: itemB.response, Query: itemB.prompt})
	if !near(ab[0], sa.Reward) || !near(ab[1], sb.Reward) || !near(full.Effects[0], sa.Effect) || sa.ModelVersion != full.ModelVersion {
		t.Fatalf("rewards %v, effects %v; /v1/score gives %v (effect %v) and %v", ab, full.Effects, sa.Reward, sa.Effect, sb.Reward)
	}
	// The label's context is an input: without it item A scores as /v1/score
	// does without kind, evolver, agent and benchmark.
	noCtx := scoreOf(t, c, srv.URL, Input{Update: itemA.response, Query: itemA.prompt})
	plain := post(t, c, url, []byte(fmt.Sprintf(`{"query":[%q],"prompts":[%q]}`, itemA.prompt+itemA.response, itemA.prompt)))
	if !near(plain[0], noCtx.Reward) {
		t.Fatalf("without labels: %v, /v1/score without context %v", plain[0], noCtx.Reward)
	}

	// LightRFT posts "queries" and "prompts" (and fields we ignore); its
	// queries may begin with padding before the prompt.
	lb, _ := json.Marshal(map[string]any{
		"queries":    []string{"<pad><pad>" + itemB.prompt + itemB.response},
		"prompts":    []string{itemB.prompt},
		"references": []string{"a reference"},
	})
	if got := post(t, c, url, lb); len(got) != 1 || !near(got[0], sb.Reward) {
		t.Fatalf("LightRFT-style batch got %v, want [%v]", got, sb.Reward)
	}

	// Without prompts the whole query is the update; a prompt the query
	// does not contain is reported in unsplit and scored with the query as
	// the update.
	whole := scoreOf(t, c, srv.URL, Input{Update: itemB.prompt + itemB.response})
	if got := post(t, c, url, []byte(fmt.Sprintf(`{"query":[%q]}`, itemB.prompt+itemB.response))); !near(got[0], whole.Reward) {
		t.Fatalf("without prompts: %v, want /v1/score of the whole query %v", got, whole.Reward)
	}
	code, body = postRewards(t, c, url, "", []byte(`{"query":["abc","response only"],"prompts":["abc","not in it"]}`))
	var un Rewards
	if code != 200 || json.Unmarshal(body, &un) != nil || len(un.Unsplit) != 1 || un.Unsplit[0] != 1 {
		t.Fatalf("unsplit answer %d %s, want unsplit [1]", code, body)
	}
}

// TestRewardsTokenRequired: with a score token configured, /v1/rewards
// answers 401 without it or with a wrong one, and 200 with it.
func TestRewardsTokenRequired(t *testing.T) {
	t.Parallel()
	tr, err := httpTrainer(t, Config{ScoreToken: "s3cret-token"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	body := openRLHFBatch(t, itemA)
	for _, auth := range []string{"", "Bearer wrong", "Basic s3cret-token", "s3cret-token"} {
		code, b := postRewards(t, srv.Client(), srv.URL+"/v1/rewards", auth, body)
		if code != http.StatusUnauthorized || !strings.Contains(string(b), "bearer token") {
			t.Fatalf("Authorization %q = %d %s, want 401", auth, code, b)
		}
	}
	code, b := postRewards(t, srv.Client(), srv.URL+"/v1/rewards", "Bearer s3cret-token", body)
	if r := rewardsOf(t, code, b); len(r) != 1 {
		t.Fatalf("rewards %v for one query", r)
	}
}

// TestRewardsRefusals: malformed or oversized requests get 400 or 413 with
// a JSON error naming the field or the limit; GET gets 405.
func TestRewardsRefusals(t *testing.T) {
	t.Parallel()
	tr, err := httpTrainer(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	url := srv.URL + "/v1/rewards"
	many := `{"query":[` + strings.Repeat(`"x",`, maxRewardsBatch) + `"x"]}`
	huge := `{"query":["` + strings.Repeat("a", maxRewardsBody) + `"]}`
	for _, tc := range []struct {
		name, body string
		code       int
		has        string
	}{
		{"not JSON", "query=a", 400, "decode request"},
		{"empty body", "", 400, "decode request"},
		{"a JSON list", `["a"]`, 400, "decode request"},
		{"query not a list", `{"query":"a"}`, 400, "decode request"},
		{"query of numbers", `{"query":[1,2]}`, 400, "decode request"},
		{"no query", `{"prompts":["a"]}`, 400, "query: required"},
		{"empty query", `{"query":[]}`, 400, "query: empty list"},
		{"empty queries", `{"queries":[]}`, 400, "queries: empty list"},
		{"both spellings", `{"query":["a"],"queries":["a"]}`, 400, "not both"},
		{"short prompts", `{"query":["a","b"],"prompts":["a"]}`, 400, "prompts: 1 items for 2"},
		{"long labels", `{"query":["a"],"labels":["x","y"]}`, 400, "labels: 2 items for 1"},
		{"empty prompts", `{"query":["a"],"prompts":[]}`, 400, "prompts: 0 items for 1"},
		{"bad label object", `{"query":["a"],"labels":[{"kind":"skill","colour":"red"}]}`, 400, "labels[0]"},
		{"bad label string", `{"query":["a"],"labels":["{\"kind\":3}"]}`, 400, "labels[0]"},
		{"too many items", many, 413, fmt.Sprintf("the limit is %d", maxRewardsBatch)},
		{"too large a body", huge, 413, fmt.Sprintf("limit of %d bytes", maxRewardsBody)},
	} {
		code, b := postRewards(t, srv.Client(), url, "", []byte(tc.body))
		var e struct{ Error string }
		if code != tc.code || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, tc.has) {
			t.Errorf("%s: %d %.200s, want %d with an error containing %q", tc.name, code, b, tc.code, tc.has)
		}
	}
	// Labels that are not objects (a reference answer, a number, null) are
	// ignored, as are unknown top-level fields.
	code, b := postRewards(t, srv.Client(), url, "", []byte(`{"query":["a","b","c"],"labels":["42",7,null],"images":[null,null,null]}`))
	if r := rewardsOf(t, code, b); len(r) != 3 {
		t.Fatalf("rewards %v for 3 queries", r)
	}
	resp, err := srv.Client().Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET = %d, want 405", resp.StatusCode)
	}
}

// FuzzRewardsHandler: no request body makes /v1/rewards panic or answer
// anything but 200, 400 or 413; a 200 carries one finite reward per query.
func FuzzRewardsHandler(f *testing.F) {
	for _, s := range []string{
		string(openRLHFBatch(f, itemA, itemB)),
		`{"query":["a"],"prompts":["a"],"labels":[null]}`,
		`{"queries":["<pad>p r"],"prompts":["p"]}`,
		`{"query":["x"],"labels":["{\"kind\":\"tool\"}"]}`,
		`{"query":[""],"prompts":[""]}`,
		`{"query":["\u0000\ud800"],"prompts":["\ufffd"]}`,
		`{"query":[]}`, `{"query":null}`, `[]`, `null`, `{`, "",
	} {
		f.Add([]byte(s))
	}
	tr, err := httpTrainer(f, Config{})
	if err != nil {
		f.Fatal(err)
	}
	h := tr.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/rewards", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			var req RewardsRequest
			_ = json.Unmarshal(body, &req)
			n := len(req.Query) + len(req.Queries)
			var resp Rewards
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || len(resp.Rewards) != n {
				t.Fatalf("200 %s for %d queries: %v", w.Body.Bytes(), n, err)
			}
			for _, v := range resp.Rewards {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("reward %v", v)
				}
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}
