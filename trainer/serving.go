package trainer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// Serving. /v1/score and /v1/rewards answer only from the weights of a
// published checkpoint, never from the live, still-training ones, so an
// answer names the exact weights that gave it (model_version and
// checkpoint_sha256, the sha256 of the checkpoint file) and can be
// reproduced later by pinning that version while its file is kept.
//
// When a checkpoint is published (publish, after CheckpointStore.Save, and
// after restore at start-up), its weights are copied into a separate set of
// models, the served set, and swapped in while /v1/score waits (both hold
// t.mu, the backend's lock), so no answer ever mixes two checkpoints. After
// a Save the copy is taken from the live models before the next training
// step (only the training goroutine trains, and publish runs on it right
// after Save), so it equals the file's tensors bit for bit; after restore
// it is the file's tensors themselves.
//
// Memory. The served set is one more Model per ensemble member, allocated
// once at the first publish and refilled in place at each later one: the
// same TensorBytes as a live member (weights, gradients and both AdamW
// moments, float32 each; Model has no inference-only form). At the default
// ModelConfig (the additive structure) the network's table is (2^18 + 4·1024)
// rows × 16 floats ≈ 17 MB per tensor and the text table 2^18 × 4 ≈ 4 MB, so
// ≈ 90 MB per member (the MLP structure's × 64 table: ≈ 273 MB), on the backend's memory (host
// RAM on the CPU, device memory on CUDA). The copy itself needs no host
// buffer on the CPU (it reads the live tensors in place); from a device it
// downloads each tensor once. A pinned older version (below) costs a second
// such set, allocated at the first pin and then reused, plus the transient
// host memory of reading its file (weights and both moments, ≈ 3 × 21 MB
// per member at the defaults) each time a different version is pinned.
//
// Pinning. A request names a version with the URL query parameter
// ?model_version=<trainer>-v<N> (both endpoints; a JSON body's
// "model_version" is refused with 400, so a pin is never silently ignored:
// RL trainers such as OpenRLHF take the reward model's URL, not its body).
// The served version answers from the served set; another version kept in
// the checkpoint directory (the newest CheckpointKeep files) is read from
// its file into the pinned set, which caches that one version; a version
// not kept answers 404 naming the kept ones.
//
// Warming. Every answer says "warming": true until the evaluation verdict
// of the checkpoint that answered is VerdictBeats (setVerdict, called after
// each checkpoint's evaluation); a checkpoint without a verdict is warming.

// VerdictBeats is the evaluation verdict of a checkpoint that beats its
// baselines (trainer/eval's VerdictBeats; trainer cannot import trainer/eval,
// so a test there checks the two are equal). Until the checkpoint that
// answers has this verdict, /v1/score and /v1/rewards answer "warming": true.
const VerdictBeats = "beats baselines"

// servedSet is one checkpoint's weights loaded into models for scoring.
// Its models are used only under Trainer.mu.
type servedSet struct {
	// version, sha256 and path name the checkpoint in the models; version
	// is "" while the set holds none (before the first load, or after a
	// load that failed half-way).
	version, sha256, path string
	models                []*Model
}

// servingState is what /v1/score and /v1/rewards answer from: the weights of
// a published checkpoint, never the live ones, and the evaluation verdict
// of each checkpoint. mu guards the fields; the sets' models are used only
// under Trainer.mu (taken before mu, never after).
type servingState struct {
	mu sync.Mutex
	// cur is the published checkpoint served by default; pinned caches one
	// other version a request pinned. Either is nil until first needed.
	cur, pinned *servedSet
	// verdicts maps a model version to its evaluation verdict (the newest
	// maxVerdicts versions).
	verdicts map[string]string
	// loadErr says why the last publish could not be served ("" when it was).
	loadErr string
}

// setVerdict records the evaluation verdict of checkpoint modelVersion
// (VerdictBeats or another). Safe for concurrent use.
func (s *servingState) setVerdict(modelVersion, verdict string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verdicts == nil {
		s.verdicts = map[string]string{}
	}
	s.verdicts[modelVersion] = verdict
}

// maxVerdicts bounds the verdicts remembered: beyond it the oldest
// versions' (by index) are forgotten (a version that old is no longer kept
// with any sensible CheckpointKeep, so it cannot be served or pinned).
const maxVerdicts = 1024

// pruneVerdicts forgets the oldest verdicts beyond maxVerdicts; index
// parses a version's index (versions it cannot parse go first). Call with
// s.mu held.
func (s *servingState) pruneVerdicts(index func(string) (int64, bool)) {
	if len(s.verdicts) <= maxVerdicts {
		return
	}
	type vi struct {
		v string
		i int64
	}
	all := make([]vi, 0, len(s.verdicts))
	for v := range s.verdicts {
		i, ok := index(v)
		if !ok {
			i = -1
		}
		all = append(all, vi{v, i})
	}
	sort.Slice(all, func(a, b int) bool { return all[a].i < all[b].i || all[a].i == all[b].i && all[a].v < all[b].v })
	for _, x := range all[:len(all)-maxVerdicts] {
		delete(s.verdicts, x.v)
	}
}

// warming says whether answers of version are warming: its verdict is not
// VerdictBeats (or it has none yet).
func (s *servingState) warming(version string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verdicts[version] != VerdictBeats
}

// served returns the served checkpoint's version and sha256 ("" before one).
func (s *servingState) served() (version, sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return "", ""
	}
	return s.cur.version, s.cur.sha256
}

// ServedVersion returns the model version and checkpoint file sha256 that
// /v1/score answers from by default ("", "" before a checkpoint is published
// or restored).
func (t *Trainer) ServedVersion() (modelVersion, checkpointSHA256 string) { return t.serving.served() }

// SetVerdict records checkpoint modelVersion's evaluation verdict: answers
// from it stop warming when verdict is VerdictBeats. Safe for concurrent use.
func (t *Trainer) SetVerdict(modelVersion, verdict string) {
	t.serving.setVerdict(modelVersion, verdict)
}

// Checkpoint writes a checkpoint of the current weights and publishes it
// (it becomes the checkpoint /v1/score serves), as Run does every
// checkpoint_every steps. It is for a trainer whose Run is not running (a
// benchmark that serves /v1/score without training from a stream); while
// Run runs, only its own goroutine checkpoints.
func (t *Trainer) Checkpoint(ctx context.Context) error { return t.checkpoint(ctx) }

// servingError is a request /v1/score or /v1/rewards cannot serve: its
// status, why, and the versions that can be pinned.
type servingError struct {
	code      int
	err       error
	available []string
}

func (e *servingError) Error() string { return e.err.Error() }
func (e *servingError) Unwrap() error { return e.err }

// writeServingError answers err as JSON: {"error", "available"} for a
// *servingError, else 500.
func writeServingError(w http.ResponseWriter, err error) {
	var se *servingError
	if !errors.As(err, &se) {
		writeJSONError(w, http.StatusInternalServerError, err)
		return
	}
	if se.code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "10")
	}
	writeJSON(w, se.code, map[string]any{"error": se.err.Error(), "available": se.available})
}

// servedAnswer names the weights that gave an answer.
type servedAnswer struct {
	version, sha256 string
	warming         bool
}

// serveCheckpoint makes ck, just saved (its tensors are then the live
// models', read through ck.tensor's source) or just restored (its Models
// hold the tensors), the served checkpoint. The swap is atomic for
// /v1/score: it runs under t.mu. On failure nothing is served until the
// next publish (/v1/score answers 503 saying why).
func (t *Trainer) serveCheckpoint(ck *Checkpoint) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.serving
	s.mu.Lock()
	set := s.cur
	if set == nil {
		set = &servedSet{}
		s.cur = set
	}
	set.version = ""
	s.mu.Unlock()
	err := t.fillSet(set, func(i int) ModelState {
		if ck.tensor != nil {
			return liveState(t.models[i])
		}
		return ck.Models[i]
	}, len(ck.Models))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("serve checkpoint %s: %w", ck.ModelVersion, err)
		s.loadErr = err.Error()
		return err
	}
	set.version, set.sha256, set.path = ck.ModelVersion, ck.FileSHA256(), ck.Path()
	s.loadErr = ""
	if s.pinned != nil && s.pinned.version == set.version {
		s.pinned.version = ""
	}
	s.pruneVerdicts(t.versionIndex)
	return nil
}

// fillSet loads n members' states into set's models (allocated on the
// trainer's backend at first use, shaped like the live members). Call with
// t.mu held.
func (t *Trainer) fillSet(set *servedSet, state func(i int) ModelState, n int) error {
	if n != len(t.models) {
		return fmt.Errorf("%w: checkpoint has %d models, the trainer %d", ErrIncompatible, n, len(t.models))
	}
	for len(set.models) < n {
		m, err := NewModel(t.be, t.models[len(set.models)].Config())
		if err != nil {
			return err
		}
		set.models = append(set.models, m)
	}
	for i := 0; i < n; i++ {
		if err := set.models[i].Restore(state(i)); err != nil {
			return err
		}
	}
	return nil
}

// liveState is m's state with its tensors read in place (a backend with host
// memory) or downloaded into fresh buffers (a device), for Restore into
// another model before m's next training step. Call with t.mu held.
func liveState(m *Model) ModelState {
	st := m.Shape()
	for j := range st.Params {
		p := &st.Params[j]
		for k, dst := range []*[]float32{&p.P, &p.M, &p.V} {
			var buf []float32
			*dst = m.Tensor(j, k, &buf)
		}
	}
	return st
}

// keptVersions returns the model versions of the checkpoint files kept in
// the store, newest first.
func (t *Trainer) keptVersions() ([]string, error) {
	idx, err := t.store.list()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(idx))
	for i, n := range idx {
		out[i] = t.versionName(n)
	}
	return out, nil
}

func (t *Trainer) versionName(index int64) string { return fmt.Sprintf("%s-v%d", t.cfg.Name, index) }

// versionIndex parses "<trainer>-v<N>" (this trainer's name) into N.
func (t *Trainer) versionIndex(version string) (int64, bool) {
	rest, ok := strings.CutPrefix(version, t.cfg.Name+"-v")
	if !ok || rest == "" || rest[0] == '+' || rest[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 1 || t.versionName(n) != version {
		return 0, false
	}
	return n, true
}

// serve scores ins with the published checkpoint, or with the kept
// checkpoint named by pin when pin is not "" (see the file comment), and
// says which. Errors are *servingError.
func (t *Trainer) serve(ins []*Input, pin string) ([]Score, servedAnswer, error) {
	s := &t.serving
	if pin != "" {
		s.mu.Lock()
		cur := s.cur != nil && s.cur.version == pin
		s.mu.Unlock()
		if !cur {
			return t.servePinned(ins, pin)
		}
	}
	var (
		out         []Score
		a           servedAnswer
		loadFailure string
		scored      bool
	)
	t.withModels(func() {
		s.mu.Lock()
		set := s.cur
		loadFailure = s.loadErr
		s.mu.Unlock()
		if set == nil || set.version == "" || (pin != "" && set.version != pin) {
			return
		}
		out = t.scoreWith(set.models, ins)
		a = servedAnswer{version: set.version, sha256: set.sha256}
		scored = true
	})
	if !scored {
		if pin != "" {
			// Published meanwhile: pin the file.
			return t.servePinned(ins, pin)
		}
		kept, _ := t.keptVersions()
		if loadFailure != "" {
			return nil, servedAnswer{}, &servingError{code: http.StatusServiceUnavailable, available: nonNil(kept),
				err: fmt.Errorf("the published checkpoint could not be loaded for serving (%s); see the trainer's log, or pin a kept version with ?model_version=", loadFailure)}
		}
		return nil, servedAnswer{}, &servingError{code: http.StatusServiceUnavailable, available: nonNil(kept),
			err: errors.New("no checkpoint is published yet: the trainer answers only from published checkpoints, and writes its first one " +
				"after checkpoint_every steps or checkpoint_interval (or when it stops); retry later, or pin a kept version with ?model_version=")}
	}
	a.warming = s.warming(a.version)
	if pin != "" {
		if idx, ok := t.versionIndex(pin); ok {
			t.notePin(idx)
		}
	}
	return out, a, nil
}

// withModels runs f holding the training lock (t.mu), released by a defer:
// a panic in f (a backend fault while scoring, recovered by net/http) does
// not leave training stopped behind a held lock.
func (t *Trainer) withModels(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
}

// servePinned scores ins with kept checkpoint pin, loading its file into
// the pinned set unless it already holds it.
func (t *Trainer) servePinned(ins []*Input, pin string) ([]Score, servedAnswer, error) {
	s := &t.serving
	notKept := func() error {
		kept, _ := t.keptVersions()
		return &servingError{code: http.StatusNotFound, available: nonNil(kept),
			err: fmt.Errorf("model_version %q is not a kept checkpoint of trainer %s (kept: %s); pin one of those, or omit model_version for the published one",
				pin, t.cfg.Name, strings.Join(nonNil(kept), ", "))}
	}
	idx, ok := t.versionIndex(pin)
	if !ok {
		return nil, servedAnswer{}, notKept()
	}
	for {
		s.mu.Lock()
		cached := s.pinned != nil && s.pinned.version == pin
		s.mu.Unlock()
		var ck *Checkpoint
		if !cached {
			// Read the file before taking t.mu: training goes on meanwhile.
			path := filepath.Join(t.cfg.CheckpointDir, FileName(idx))
			var err error
			if ck, err = ReadCheckpoint(path); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil, servedAnswer{}, notKept()
				}
				return nil, servedAnswer{}, &servingError{code: http.StatusInternalServerError,
					err: fmt.Errorf("read checkpoint %s: %w; pin another kept version or omit model_version", pin, err)}
			}
			if ck.ModelVersion != pin {
				return nil, servedAnswer{}, &servingError{code: http.StatusInternalServerError,
					err: fmt.Errorf("checkpoint file %s holds model_version %q, not %q", ck.Path(), ck.ModelVersion, pin)}
			}
		}
		var (
			out    []Score
			a      servedAnswer
			reread bool
			err    error
		)
		t.withModels(func() {
			s.mu.Lock()
			set := s.pinned
			if set == nil {
				set = &servedSet{}
				s.pinned = set
			}
			hit := set.version == pin
			if !hit && ck != nil {
				set.version = ""
			}
			s.mu.Unlock()
			if !hit {
				if ck == nil {
					// Another pin replaced it meanwhile: read the file.
					reread = true
					return
				}
				if ferr := t.fillSet(set, func(i int) ModelState { return ck.Models[i] }, len(ck.Models)); ferr != nil {
					err = &servingError{code: http.StatusConflict,
						err: fmt.Errorf("checkpoint %s cannot be served by this trainer's models: %w; pin another kept version or omit model_version", pin, ferr)}
					return
				}
				s.mu.Lock()
				set.version, set.sha256, set.path = ck.ModelVersion, ck.FileSHA256(), ck.Path()
				s.mu.Unlock()
			}
			out = t.scoreWith(set.models, ins)
			a = servedAnswer{version: set.version, sha256: set.sha256}
		})
		if reread {
			continue
		}
		if err != nil {
			return nil, servedAnswer{}, err
		}
		a.warming = s.warming(a.version)
		t.notePin(idx)
		return out, a, nil
	}
}

// notePin marks checkpoint idx pinned (CheckpointStore.Pin), at most once
// a minute per version. Safe for concurrent use.
func (t *Trainer) notePin(idx int64) {
	t.pinMu.Lock()
	defer t.pinMu.Unlock()
	if t.pinnedAt == nil {
		t.pinnedAt = map[int64]time.Time{}
	}
	if time.Since(t.pinnedAt[idx]) < time.Minute {
		return
	}
	if err := t.store.Pin(idx); err != nil {
		t.log.Warn().Err(err).Int64("checkpoint", idx).Msg("cannot mark the pinned checkpoint: it may be pruned before --pin-retention")
		return
	}
	t.pinnedAt[idx] = time.Now()
}

// scoreWith scores ins with models (an ensemble). Call with t.mu held.
func (t *Trainer) scoreWith(models []*Model, ins []*Input) []Score {
	per := make([][]Prediction, len(models))
	for k, m := range models {
		per[k] = m.Predict(ins)
	}
	out := aggregate(per, len(ins), t.cfg.Lambda)
	if len(models) > 0 {
		fs := FeatureSet(models[0].Config())
		for i := range out {
			out[i].Features = fs
		}
	}
	return out
}

// pinOf reads the pinned version of a /v1/score or /v1/rewards request: the
// URL's model_version query parameter ("" for none: the published one).
func pinOf(r *http.Request) (string, error) {
	vs := r.URL.Query()["model_version"]
	switch {
	case len(vs) > 1:
		return "", errors.New("model_version: given more than once in the URL; give one version (e.g. ?model_version=trainer-v7)")
	case len(vs) == 0:
		return "", nil
	}
	return strings.TrimSpace(vs[0]), nil
}

// errPinInBody refuses a JSON body's model_version.
var errPinInBody = errors.New(`model_version: pin a version with the URL's query parameter (POST /v1/score?model_version=trainer-v7), not in the JSON body`)

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// checkpointEvent is ck's checkpoint_published event from trainer name:
// with the file's location, a file:// URI of its absolute path on this
// host, and its sha256 (both "" for a checkpoint not saved or read).
func checkpointEvent(ck *Checkpoint, name string) *schemas.CheckpointPublished {
	ev := &schemas.CheckpointPublished{ModelVersion: ck.ModelVersion, Step: ck.Step, SamplesTrained: ck.SamplesTrained,
		CheckpointURI: fileURI(ck.Path()), CheckpointSHA256: ck.FileSHA256()}
	ev.EventID = "checkpoint:" + ck.ModelVersion
	ev.EventTime = ck.CreatedAt
	// The trainer's identity: source "trainer:<name>" and project ''
	// (checkpoints are the pipeline's, not a tenant's). The checkpoints
	// table is keyed (project, source, model_version, event_id), and the
	// gateway gives every tenant event the tenant's non-empty project, so
	// a checkpoint_published a tenant forges never replaces this row.
	ev.Project, ev.Source = "", "trainer:"+name
	for p, o := range ck.Offsets {
		ev.Offsets = append(ev.Offsets, schemas.TopicOffset{Topic: ck.Topic, Partition: p, Offset: o})
	}
	hm := Summarize(ck.Heldout)
	ev.Metrics = map[string]float64{"heldout_acc": hm.Acc, "heldout_macro_f1": hm.MacroF1, "heldout_mae": hm.MAE, "heldout_n": float64(hm.N)}
	return ev
}

// fileURI is path as a file:// URI of its absolute path ("" for "").
func fileURI(path string) string {
	if path == "" {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}
