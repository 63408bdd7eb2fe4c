package trainer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// fileSHA256 hashes a file's bytes as `sha256sum` does.
func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var servingInput = Input{Update: "Always run the full test suite before you submit.", Query: "task 12 failed", Kind: "skill",
	Evolver: "qwen-7b", Agent: "gpt-4o-mini", Benchmark: "swe-lite"}

// postJSON posts v (or a []byte body) to url and returns the status and body.
func postJSON(t testing.TB, c *http.Client, url string, v any) (int, []byte) {
	t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out.Bytes()
}

// scoreAt posts servingInput to /v1/score with query (e.g.
// "?model_version=x") and decodes a 200 answer.
func scoreAt(t testing.TB, c *http.Client, base, query string) Score {
	t.Helper()
	code, body := postJSON(t, c, base+"/v1/score"+query, ScoreRequest{Input: servingInput})
	if code != http.StatusOK {
		t.Fatalf("score%s = %d %s", query, code, body)
	}
	var s Score
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// rewardsAt posts a one-item OpenRLHF batch to /v1/rewards with query.
func rewardsAt(t testing.TB, c *http.Client, base, query string) Rewards {
	t.Helper()
	code, body := postJSON(t, c, base+"/v1/rewards"+query, openRLHFBatch(t, itemA))
	if code != http.StatusOK {
		t.Fatalf("rewards%s = %d %s", query, code, body)
	}
	var r Rewards
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// trainStep takes one training step on the live models (no checkpoint).
func trainStep(t testing.TB, tr *Trainer) {
	t.Helper()
	batch := []Example{{Input: servingInput, Effect: 0.9, Label: 2}, {Input: Input{Update: "skip the tests", Kind: "skill"}, Effect: -0.9}}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, m := range tr.models {
		for i := 0; i < 3; i++ {
			if _, err := m.TrainStep(batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr.step++
}

// errorOf decodes a JSON error answer.
func errorOf(t testing.TB, body []byte) (string, []string) {
	t.Helper()
	var e struct {
		Error     string   `json:"error"`
		Available []string `json:"available"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("answer %s is not a JSON error: %v", body, err)
	}
	return e.Error, e.Available
}

// TestServingAnswersOnlyFromPublishedCheckpoints: a fresh trainer answers
// 503 (a JSON error saying no checkpoint is published and what to do) on
// both endpoints; after a checkpoint, answers name its model_version and
// the sha256 of its file; training between checkpoints does not change an
// answer (the same request twice around a step gives the same bytes) while
// the live weights did change; the next checkpoint's answer differs, and
// pinning the older kept version reproduces its earlier answers exactly.
func TestServingAnswersOnlyFromPublishedCheckpoints(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Ensemble: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	c := srv.Client()

	for _, ep := range []string{"/v1/score", "/v1/rewards"} {
		body := any(ScoreRequest{Input: servingInput})
		if ep == "/v1/rewards" {
			body = openRLHFBatch(t, itemA)
		}
		code, b := postJSON(t, c, srv.URL+ep, body)
		msg, avail := errorOf(t, b)
		if code != http.StatusServiceUnavailable || !strings.Contains(msg, "no checkpoint is published yet") ||
			!strings.Contains(msg, "retry") || avail == nil || len(avail) != 0 {
			t.Fatalf("%s before any checkpoint = %d %s, want 503 saying no checkpoint is published yet", ep, code, b)
		}
	}

	ck1 := publishCheckpoint(t, tr)
	s1 := scoreAt(t, c, srv.URL, "")
	if s1.ModelVersion != ck1.ModelVersion || s1.ModelVersion != tr.cfg.Name+"-v1" {
		t.Fatalf("model_version %q, want the checkpoint's %q", s1.ModelVersion, ck1.ModelVersion)
	}
	if want := fileSHA256(t, ck1.Path()); s1.CheckpointSHA256 != want || ck1.FileSHA256() != want {
		t.Fatalf("checkpoint_sha256 %q (Save recorded %q), the file hashes to %q", s1.CheckpointSHA256, ck1.FileSHA256(), want)
	}
	r1 := rewardsAt(t, c, srv.URL, "")
	if r1.ModelVersion != s1.ModelVersion || r1.CheckpointSHA256 != s1.CheckpointSHA256 || !r1.Warming || !s1.Warming {
		t.Fatalf("rewards name %q %q warming %v, score %q %q warming %v", r1.ModelVersion, r1.CheckpointSHA256, r1.Warming,
			s1.ModelVersion, s1.CheckpointSHA256, s1.Warming)
	}

	// Training without a checkpoint: the live weights move, the answers do not.
	_, b1 := postJSON(t, c, srv.URL+"/v1/score", ScoreRequest{Input: servingInput})
	live := tr.Predict([]*Input{&servingInput})[0]
	trainStep(t, tr)
	if moved := tr.Predict([]*Input{&servingInput})[0]; moved.Effect == live.Effect {
		t.Fatalf("the training step did not change the live weights' effect %v: the test proves nothing", live.Effect)
	}
	if _, b2 := postJSON(t, c, srv.URL+"/v1/score", ScoreRequest{Input: servingInput}); !bytes.Equal(b1, b2) {
		t.Fatalf("the answer changed while training went on without a checkpoint:\n%s\n%s", b1, b2)
	}
	if r := rewardsAt(t, c, srv.URL, ""); !reflect.DeepEqual(r, r1) {
		t.Fatalf("rewards changed without a checkpoint: %+v, then %+v", r1, r)
	}

	// The next checkpoint serves the trained weights.
	ck2 := publishCheckpoint(t, tr)
	s2 := scoreAt(t, c, srv.URL, "")
	if s2.ModelVersion != ck2.ModelVersion || s2.CheckpointSHA256 != fileSHA256(t, ck2.Path()) || s2.CheckpointSHA256 == s1.CheckpointSHA256 {
		t.Fatalf("after checkpoint 2: %q %q, want %q %q", s2.ModelVersion, s2.CheckpointSHA256, ck2.ModelVersion, fileSHA256(t, ck2.Path()))
	}
	if s2.Effect == s1.Effect {
		t.Fatalf("checkpoint 2 answers %v like checkpoint 1", s2.Effect)
	}
	// The served weights are the file's: a model restored from it agrees.
	ck2r, err := ReadCheckpoint(ck2.Path())
	if err != nil {
		t.Fatal(err)
	}
	var per [][]Prediction
	for i := range ck2r.Models {
		m, err := NewModel(tr.be, ck2r.Models[i].Config)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Restore(ck2r.Models[i]); err != nil {
			t.Fatal(err)
		}
		per = append(per, m.Predict([]*Input{&servingInput}))
	}
	if want := aggregate(per, 1, tr.cfg.Lambda)[0]; want.Effect != s2.Effect || want.Std != s2.Std || want.Reward != s2.Reward {
		t.Fatalf("served %v±%v, the file's weights give %v±%v", s2.Effect, s2.Std, want.Effect, want.Std)
	}

	// Pinning the older kept version reproduces its answers exactly, on
	// both endpoints; pinning the served version is the served answer.
	trainStep(t, tr)
	q1 := "?model_version=" + url.QueryEscape(ck1.ModelVersion)
	if p := scoreAt(t, c, srv.URL, q1); !reflect.DeepEqual(p, s1) {
		t.Fatalf("pinned %s answers\n%+v\nfirst answered\n%+v", ck1.ModelVersion, p, s1)
	}
	if _, b := postJSON(t, c, srv.URL+"/v1/score"+q1, ScoreRequest{Input: servingInput}); !bytes.Equal(b, b1) {
		t.Fatalf("pinned answer bytes differ:\n%s\n%s", b, b1)
	}
	if r := rewardsAt(t, c, srv.URL, q1); !reflect.DeepEqual(r, r1) {
		t.Fatalf("pinned rewards %+v, first %+v", r, r1)
	}
	if p := scoreAt(t, c, srv.URL, "?model_version="+ck2.ModelVersion); !reflect.DeepEqual(p, s2) {
		t.Fatalf("pinning the served version: %+v, want %+v", p, s2)
	}
	if p := scoreAt(t, c, srv.URL, q1); !reflect.DeepEqual(p, s1) { // from the pinned cache
		t.Fatalf("pinned again: %+v", p)
	}
	if got := scoreAt(t, c, srv.URL, ""); !reflect.DeepEqual(got, s2) {
		t.Fatalf("a pin changed the served answer: %+v, want %+v", got, s2)
	}
}

// TestServingPinUnknownVersion: a version that is not kept answers 404 on
// both endpoints with an error naming the kept versions (also once pruned
// by CheckpointKeep), a malformed pin too; a pin given twice or in the JSON
// body is a 400.
func TestServingPinUnknownVersion(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Name: "critic", CheckpointKeep: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	c := srv.Client()
	code, b := postJSON(t, c, srv.URL+"/v1/score?model_version=critic-v1", ScoreRequest{Input: servingInput})
	if msg, avail := errorOf(t, b); code != http.StatusNotFound || len(avail) != 0 || !strings.Contains(msg, `"critic-v1"`) {
		t.Fatalf("pin before any checkpoint = %d %s, want 404", code, b)
	}
	for i := 0; i < 3; i++ {
		publishCheckpoint(t, tr)
	}
	want := []string{"critic-v3", "critic-v2"}
	for _, pin := range []string{"critic-v1", "critic-v4", "critic-v02", "other-v3", "critic-v", "critic-v-1", "v3", "critic-v3 x", "critic-v99999999999999999999"} {
		for _, ep := range []string{"/v1/score", "/v1/rewards"} {
			body := any(ScoreRequest{Input: servingInput})
			if ep == "/v1/rewards" {
				body = openRLHFBatch(t, itemA)
			}
			code, b := postJSON(t, c, srv.URL+ep+"?model_version="+url.QueryEscape(pin), body)
			msg, avail := errorOf(t, b)
			if code != http.StatusNotFound || !slices.Equal(avail, want) || !strings.Contains(msg, "critic-v3, critic-v2") {
				t.Fatalf("%s pinned to %q = %d %s, want 404 naming %v", ep, pin, code, b, want)
			}
		}
	}
	if s := scoreAt(t, c, srv.URL, "?model_version=critic-v2"); s.ModelVersion != "critic-v2" {
		t.Fatalf("pin critic-v2 answered %q", s.ModelVersion)
	}
	for name, tc := range map[string]struct {
		ep, query string
		body      any
	}{
		"score twice":   {"/v1/score", "?model_version=critic-v2&model_version=critic-v3", ScoreRequest{Input: servingInput}},
		"rewards twice": {"/v1/rewards", "?model_version=critic-v2&model_version=critic-v3", openRLHFBatch(t, itemA)},
		"score body":    {"/v1/score", "", []byte(`{"update":"x","model_version":"critic-v2"}`)},
		"rewards body":  {"/v1/rewards", "", []byte(`{"query":["x"],"model_version":"critic-v2"}`)},
	} {
		code, b := postJSON(t, c, srv.URL+tc.ep+tc.query, tc.body)
		if msg, _ := errorOf(t, b); code != http.StatusBadRequest || !strings.Contains(msg, "model_version") {
			t.Errorf("%s = %d %s, want 400 about model_version", name, code, b)
		}
	}
}

// TestServingWarmingUntilBeatsBaselines: answers are warming until
// setVerdict records VerdictBeats for the version that answers; another
// verdict keeps warming, a pinned version without a verdict is warming.
func TestServingWarmingUntilBeatsBaselines(t *testing.T) {
	t.Parallel()
	tr, err := httpTrainer(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	c := srv.Client()
	v1, _ := tr.ServedVersion()
	if s := scoreAt(t, c, srv.URL, ""); !s.Warming || s.ModelVersion != v1 {
		t.Fatalf("no verdict: warming %v (%s)", s.Warming, s.ModelVersion)
	}
	tr.serving.setVerdict(v1, "no signal yet")
	if s, r := scoreAt(t, c, srv.URL, ""), rewardsAt(t, c, srv.URL, ""); !s.Warming || !r.Warming {
		t.Fatal("no signal yet: not warming")
	}
	tr.serving.setVerdict(v1, VerdictBeats)
	if s, r := scoreAt(t, c, srv.URL, ""), rewardsAt(t, c, srv.URL, ""); s.Warming || r.Warming {
		t.Fatal("beats baselines: still warming")
	}
	ck2 := publishCheckpoint(t, tr)
	if s := scoreAt(t, c, srv.URL, ""); !s.Warming || s.ModelVersion != ck2.ModelVersion {
		t.Fatalf("new checkpoint without a verdict: warming %v (%s)", s.Warming, s.ModelVersion)
	}
	if s := scoreAt(t, c, srv.URL, "?model_version="+v1); s.Warming || s.ModelVersion != v1 {
		t.Fatalf("pinned %s, which beats baselines: warming %v", v1, s.Warming)
	}
	tr.SetVerdict(ck2.ModelVersion, VerdictBeats)
	if s := scoreAt(t, c, srv.URL, ""); s.Warming {
		t.Fatal("checkpoint 2 beats baselines: still warming")
	}
}

// TestServingRestoredCheckpoint: a trainer that restored a checkpoint (its
// publish at start-up, from the file's tensors) serves it: the same answer,
// version and sha256 as the trainer that wrote it.
func TestServingRestoredCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := freshTrainer(t, Config{CheckpointDir: dir, Ensemble: 2})
	if err != nil {
		t.Fatal(err)
	}
	trainStep(t, a)
	publishCheckpoint(t, a)
	want := a.Predict([]*Input{&servingInput})[0]

	b, err := freshTrainer(t, Config{CheckpointDir: dir, Ensemble: 2})
	if err != nil {
		t.Fatal(err)
	}
	ck, path, err := b.store.LoadLatest()
	if err != nil {
		t.Fatal(err)
	}
	if ck.Path() != path || ck.FileSHA256() != fileSHA256(t, path) {
		t.Fatalf("read %s: path %q sha %q", path, ck.Path(), ck.FileSHA256())
	}
	b.publish(context.Background(), ck) // as restore() does
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	s := scoreAt(t, srv.Client(), srv.URL, "")
	if s.ModelVersion != ck.ModelVersion || s.CheckpointSHA256 != fileSHA256(t, path) || s.Effect != want.Effect || s.Std != want.Std {
		t.Fatalf("restored trainer answers %s %s %v±%v, the writer's weights %v±%v", s.ModelVersion, s.CheckpointSHA256, s.Effect, s.Std, want.Effect, want.Std)
	}
}

// TestCheckpointPublishedCarriesLocation: the event names the file as a
// file:// URI of its absolute path and its sha256, and survives the codec.
func TestCheckpointPublishedCarriesLocation(t *testing.T) {
	t.Parallel()
	tr, err := httpTrainer(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ck := publishCheckpoint(t, tr)
	ev := checkpointEvent(ck, tr.cfg.Name)
	u, err := url.Parse(ev.CheckpointURI)
	if err != nil || u.Scheme != "file" || u.Path != ck.Path() || !strings.HasPrefix(u.Path, "/") {
		t.Fatalf("checkpoint_uri %q for %s: %v", ev.CheckpointURI, ck.Path(), err)
	}
	if ev.CheckpointSHA256 != fileSHA256(t, ck.Path()) {
		t.Fatalf("checkpoint_sha256 %q, file %s", ev.CheckpointSHA256, fileSHA256(t, ck.Path()))
	}
	if err := schemas.Validate(ev, schemas.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	b, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	back, err := schemas.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.(*schemas.CheckpointPublished); got.CheckpointURI != ev.CheckpointURI || got.CheckpointSHA256 != ev.CheckpointSHA256 {
		t.Fatalf("decoded %+v", got)
	}
	if got := fileURI("/a dir/ckpt #1.hfck"); got != "file:///a%20dir/ckpt%20%231.hfck" {
		t.Fatalf("fileURI escapes to %q", got)
	}
}

// TestServingSwapIsAtomic: concurrent requests while checkpoints are
// published each get one checkpoint's exact answer, never a mix (go test
// -race also checks the locking).
func TestServingSwapIsAtomic(t *testing.T) {
	t.Parallel()
	tr, err := httpTrainer(t, Config{Ensemble: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	c := srv.Client()
	answers := map[string]float64{}
	v, _ := tr.ServedVersion()
	answers[v] = scoreAt(t, c, srv.URL, "").Effect
	var mu sync.Mutex
	var seen []Score
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				body, _ := json.Marshal(ScoreRequest{Input: servingInput})
				resp, err := c.Post(srv.URL+"/v1/score", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				var s Score
				err = json.NewDecoder(resp.Body).Decode(&s)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("score = %d: %v", resp.StatusCode, err)
					return
				}
				mu.Lock()
				seen = append(seen, s)
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 4; i++ {
		trainStep(t, tr)
		ck := publishCheckpoint(t, tr)
		tr.SetVerdict(ck.ModelVersion, VerdictBeats)
		answers[ck.ModelVersion] = tr.Predict([]*Input{&servingInput})[0].Effect
	}
	close(stop)
	wg.Wait()
	for _, s := range seen {
		if want, ok := answers[s.ModelVersion]; !ok || s.Effect != want {
			t.Fatalf("answer %s effect %v, that version's is %v (known %v)", s.ModelVersion, s.Effect, want, ok)
		}
	}
	fmt.Fprintf(os.Stderr, "%d concurrent answers over %d versions\n", len(seen), len(answers))
}

// FuzzServingHandlers: no URL query or body makes /v1/score or /v1/rewards
// panic or answer anything but 200 (naming a kept version), 400, 404 (a
// JSON error naming the kept versions) or 413; a pin of a kept version
// answers 200 from it.
func FuzzServingHandlers(f *testing.F) {
	for _, s := range []struct{ query, body string }{
		{"model_version=fuzz-v1", `{"update":"x"}`},
		{"model_version=fuzz-v2", `{"query":["x"]}`},
		{"model_version=fuzz-v1&model_version=fuzz-v2", `{"update":"x"}`},
		{"model_version=", `{"update":"x","model_version":"fuzz-v1"}`},
		{"model_version=%zz", `{"query":["x"],"model_version":null}`},
		{"model_version=fuzz-v0001", `{"update":"x"}`},
		{"model_version=fuzz-v9223372036854775808", `{"update":"x"}`},
		{"model_version=fuzz-v-1;x=1", `{"update":"x"}`},
		{"model_version=%00", `{`},
	} {
		f.Add(s.query, []byte(s.body))
	}
	tr, err := freshTrainer(f, Config{Name: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	publishCheckpoint(f, tr)
	publishCheckpoint(f, tr)
	h := tr.Handler()
	f.Fuzz(func(t *testing.T, query string, body []byte) {
		for _, ep := range []string{"/v1/score", "/v1/rewards"} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/v1/score", bytes.NewReader(body))
			r.URL.Path, r.URL.RawQuery = ep, query
			h.ServeHTTP(w, r)
			var resp struct {
				ModelVersion string   `json:"model_version"`
				Error        string   `json:"error"`
				Available    []string `json:"available"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil && w.Code != http.StatusMethodNotAllowed {
				t.Fatalf("%s?%s: %d %q is not JSON: %v", ep, query, w.Code, w.Body.Bytes(), err)
			}
			switch w.Code {
			case http.StatusOK:
				pin := r.URL.Query().Get("model_version")
				if resp.ModelVersion != "fuzz-v1" && resp.ModelVersion != "fuzz-v2" || (pin != "" && strings.TrimSpace(pin) != resp.ModelVersion) {
					t.Fatalf("%s?%s answered from %q", ep, query, resp.ModelVersion)
				}
			case http.StatusNotFound:
				if !slices.Equal(resp.Available, []string{"fuzz-v2", "fuzz-v1"}) {
					t.Fatalf("404 %s", w.Body.Bytes())
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			default:
				t.Fatalf("%s?%s: status %d %s", ep, query, w.Code, w.Body.Bytes())
			}
		}
	})
}

// TestCheckpointServesIdleTrainer: Checkpoint on a trainer that never ran
// (bench train's use) writes and serves a checkpoint.
func TestCheckpointServesIdleTrainer(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	s := scoreAt(t, srv.Client(), srv.URL, "")
	v, sha := tr.ServedVersion()
	if s.ModelVersion != "idle-v1" || v != s.ModelVersion || s.CheckpointSHA256 != sha ||
		sha != fileSHA256(t, filepath.Join(tr.cfg.CheckpointDir, FileName(1))) {
		t.Fatalf("served %s %s (ServedVersion %s %s)", s.ModelVersion, s.CheckpointSHA256, v, sha)
	}
}

// TestVerdictsBounded: beyond maxVerdicts the oldest versions' verdicts are
// forgotten, the newest kept.
func TestVerdictsBounded(t *testing.T) {
	t.Parallel()
	tr, err := freshTrainer(t, Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	s := &tr.serving
	for i := 1; i <= maxVerdicts+10; i++ {
		s.setVerdict(tr.versionName(int64(i)), VerdictBeats)
	}
	s.setVerdict("junk", VerdictBeats)
	s.mu.Lock()
	s.pruneVerdicts(tr.versionIndex)
	n := len(s.verdicts)
	s.mu.Unlock()
	if n != maxVerdicts || !s.warming("junk") || !s.warming("b-v10") || s.warming("b-v11") || s.warming(tr.versionName(maxVerdicts+10)) {
		t.Fatalf("%d verdicts kept; junk warming %v, b-v10 %v, b-v11 %v", n, s.warming("junk"), s.warming("b-v10"), s.warming("b-v11"))
	}
}
