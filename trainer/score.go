package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
)

// ScoreRequest is the body of POST /v1/score: a candidate update. The
// checkpoint that answers is the published one, or the one the URL's
// ?model_version= pins (serving.go).
type ScoreRequest struct {
	Input
	// Project is the project whose critic the client means (optional; the
	// URL's ?project= says the same): a trainer of one project
	// (Config.Project) answers 403 to another project's request. Not an
	// input of the model.
	Project string `json:"project,omitempty"`
	// ModelVersion is refused (400) when present: pin a version with the
	// URL's query parameter ?model_version=, the same for /v1/rewards.
	ModelVersion json.RawMessage `json:"model_version,omitempty"`
}

// MemberScore is one ensemble member's prediction.
type MemberScore struct {
	Effect float64    `json:"effect"`
	Std    float64    `json:"std"`
	Probs  [3]float64 `json:"-"`
	Label  string     `json:"label"`
}

// Score is the answer of POST /v1/score. With an ensemble of K models, Effect
// is the mean of the members' means, Std the std of their equal-weight
// mixture (sqrt(mean variance + variance of means)), Probs the mean
// probabilities, and Label the majority vote of the members' argmax labels
// (ties broken by the mean probability).
type Score struct {
	Effect float64            `json:"effect"`
	Std    float64            `json:"std"`
	Probs  map[string]float64 `json:"probs"`
	Label  string             `json:"label"`
	// ModelStd is the ensemble's disagreement, the std of its members'
	// means: the model's own uncertainty (0 with one member). Std is mostly
	// the label's noise, which no choice among candidates can avoid.
	ModelStd float64 `json:"model_std"`
	// Reward is Effect − λ·ModelStd: the effect itself by default (λ 0),
	// penalised, when λ is set, only by what the model does not know.
	Reward float64 `json:"reward"`
	Lambda float64 `json:"lambda"`
	// Features names the feature set and structure of the model that
	// answered (FeatureSet), so a caller knows what it read.
	Features string `json:"features"`
	// ModelVersion is the checkpoint whose weights answered ("<trainer>-v<N>"),
	// CheckpointSHA256 the sha256 of its file as saved (the
	// checkpoint_published event's checkpoint_sha256).
	ModelVersion     string `json:"model_version"`
	CheckpointSHA256 string `json:"checkpoint_sha256"`
	// Warming is true until that checkpoint's evaluation verdict is that it
	// beats its baselines (VerdictBeats): until then the score carries no
	// more information than a trivial baseline.
	Warming  bool           `json:"warming"`
	Ensemble int            `json:"ensemble"`
	Votes    map[string]int `json:"votes"`
	Members  []MemberScore  `json:"members"`
}

// maxScoreBody caps a /v1/score request body.
const maxScoreBody = 1 << 20

// Predict scores inputs with the live, still-training ensemble (not what
// /v1/score serves: see serving.go); ModelVersion is the latest published
// checkpoint, which the live weights may have moved past. For diagnostics
// and tests. Safe for concurrent use (it waits for the current training step).
func (t *Trainer) Predict(ins []*Input) []Score {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.predictLocked(ins)
	for i := range out {
		out[i].ModelVersion = t.modelVersion
	}
	return out
}

func (t *Trainer) predictLocked(ins []*Input) []Score {
	per := make([][]Prediction, len(t.models))
	for k, m := range t.models {
		per[k] = m.Predict(ins)
	}
	return aggregate(per, len(ins), t.cfg.Lambda)
}

// aggregate combines members' predictions (per[member][input]).
func aggregate(per [][]Prediction, n int, lambda float64) []Score {
	K := float64(len(per))
	out := make([]Score, n)
	for i := 0; i < n; i++ {
		var mean, meanVar, meanSq float64
		var probs [3]float64
		var votes [3]int
		s := Score{Lambda: lambda, Ensemble: len(per)}
		for k := range per {
			p := per[k][i]
			mean += p.Mean / K
			meanSq += p.Mean * p.Mean / K
			meanVar += p.Std * p.Std / K
			for c := range probs {
				probs[c] += p.Probs[c] / K
			}
			lbl := argmax(p.Probs)
			votes[lbl]++
			s.Members = append(s.Members, MemberScore{Effect: p.Mean, Std: p.Std, Probs: p.Probs, Label: LabelNames[lbl]})
		}
		s.Effect = mean
		s.ModelStd = math.Sqrt(math.Max(0, meanSq-mean*mean))
		s.Std = math.Sqrt(meanVar + s.ModelStd*s.ModelStd)
		s.Reward = s.Effect - lambda*s.ModelStd
		best := 0
		for c := 1; c < 3; c++ {
			if votes[c] > votes[best] || (votes[c] == votes[best] && probs[c] > probs[best]) {
				best = c
			}
		}
		s.Label = LabelNames[best]
		s.Probs = map[string]float64{}
		s.Votes = map[string]int{}
		for c, name := range LabelNames {
			s.Probs[name] = probs[c]
			s.Votes[name] = votes[c]
		}
		out[i] = s
	}
	return out
}

var errEmptyUpdate = errors.New("update: required (the candidate artifact text)")

func (t *Trainer) handleScore(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { t.metrics.scoreSeconds.Observe(time.Since(start).Seconds()) }()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	pin, err := pinOf(r)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err)
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxScoreBody))
	dec.DisallowUnknownFields()
	var req ScoreRequest
	if err := dec.Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, fmt.Errorf("decode request: %w", err))
		return
	}
	if req.ModelVersion != nil {
		writeJSONError(w, http.StatusBadRequest, errPinInBody)
		return
	}
	if !t.checkProject(w, r, req.Project) {
		return
	}
	if req.Update == "" {
		writeJSONError(w, http.StatusBadRequest, errEmptyUpdate)
		return
	}
	scores, a, err := t.serve([]*Input{&req.Input}, pin)
	if err != nil {
		writeServingError(w, err)
		return
	}
	s := scores[0]
	s.ModelVersion, s.CheckpointSHA256, s.Warming = a.version, a.sha256, a.warming
	writeJSON(w, http.StatusOK, s)
}

func writeJSONError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
