package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// POST /v1/rewards: the critic as a remote reward model for RL trainers
// (OpenRLHF's and LightRFT's remote-RM protocol). An evolver trained with
// PPO/GRPO sees evidence (the prompt) and writes a candidate update (the
// response); the trainer posts the batch here and reads one reward per
// item.

const (
	// maxRewardsBody caps a /v1/rewards request body (413 beyond it).
	maxRewardsBody = 16 << 20
	// maxRewardsBatch caps the items of one /v1/rewards request (413
	// beyond it). One request is scored under one model version, holding
	// the training step for its duration.
	maxRewardsBatch = 1024
)

// RewardsRequest is the body of POST /v1/rewards. Unknown fields (LightRFT's
// "references" and "images", fields a newer client adds) are ignored.
type RewardsRequest struct {
	// Query holds, per item, the prompt followed by the response, as
	// OpenRLHF sends it. Required unless Queries is given.
	Query []string `json:"query"`
	// Queries is LightRFT's name for Query; give exactly one of the two.
	Queries []string `json:"queries"`
	// Prompts holds, per item, the prompt (the evidence the evolver saw):
	// the response is what follows its first occurrence in the query.
	// Optional; without it the whole query is the candidate update.
	Prompts []string `json:"prompts"`
	// Labels holds, per item, the dataset's label. A label that is a JSON
	// object (or a string holding one) with the fields kind, evolver,
	// agent and benchmark gives the critic those inputs; any other label
	// (null, a number, a plain string such as a reference answer) is
	// ignored. Optional.
	Labels []json.RawMessage `json:"labels"`
	// ModelVersion is refused (400) when present: pin a version with the
	// URL's query parameter (POST /v1/rewards?model_version=trainer-v7),
	// which a remote-RM client sets in the reward model's URL.
	ModelVersion json.RawMessage `json:"model_version,omitempty"`
	// Project is the project whose critic the client means (optional; a
	// remote-RM client that cannot add fields gives the URL's ?project=):
	// a trainer of one project (Config.Project) answers 403 to another
	// project's request.
	Project string `json:"project,omitempty"`
}

// Rewards is the answer of POST /v1/rewards. OpenRLHF and LightRFT read
// "rewards" and ignore the other fields.
type Rewards struct {
	// Rewards holds one reward per query, in the request's order: the
	// Reward of /v1/score (effect − λ·std) for the same input.
	Rewards []float64 `json:"rewards"`
	// Effects holds the predicted effects (the ensemble mean), same order.
	Effects []float64 `json:"effects"`
	// ModelVersion is the checkpoint that scored the whole batch,
	// CheckpointSHA256 the sha256 of its file, Warming whether its
	// evaluation has not yet shown it beats its baselines (as /v1/score).
	ModelVersion     string  `json:"model_version"`
	CheckpointSHA256 string  `json:"checkpoint_sha256"`
	Warming          bool    `json:"warming"`
	Lambda           float64 `json:"lambda"`
	// Features names the feature set of the model that answered
	// (FeatureSet), as /v1/score's answers do.
	Features string `json:"features"`
	// Unsplit lists the indices of the items whose query does not contain
	// their (non-empty) prompt: their whole query was scored as the
	// update. Empty when every item split.
	Unsplit []int `json:"unsplit"`
}

// labelContext is the part of a label the critic reads.
type labelContext struct {
	Kind      string `json:"kind"`
	Evolver   string `json:"evolver"`
	Agent     string `json:"agent"`
	Benchmark string `json:"benchmark"`
}

// rewardsError is a refused /v1/rewards request: its status and why.
type rewardsError struct {
	code int
	err  error
}

func (e *rewardsError) Error() string { return e.err.Error() }
func (e *rewardsError) Unwrap() error { return e.err }

func badRewards(format string, a ...any) error {
	return &rewardsError{code: http.StatusBadRequest, err: fmt.Errorf(format, a...)}
}

// rewardInputs checks req and maps each item to the critic's input: the
// prompt is the evidence (Input.Query), the rest of the query the
// candidate update (Input.Update), the label's fields the categorical
// inputs. It also returns the indices whose query did not contain the prompt.
func rewardInputs(req *RewardsRequest) ([]*Input, []int, error) {
	queries, field := req.Query, "query"
	if req.Queries != nil {
		if req.Query != nil {
			return nil, nil, badRewards("give one of query and queries, not both")
		}
		queries, field = req.Queries, "queries"
	}
	switch {
	case queries == nil:
		return nil, nil, badRewards("query: required (a list of prompt+response strings)")
	case len(queries) == 0:
		return nil, nil, badRewards("%s: empty list", field)
	case len(queries) > maxRewardsBatch:
		return nil, nil, &rewardsError{code: http.StatusRequestEntityTooLarge,
			err: fmt.Errorf("%s: %d items, the limit is %d per request", field, len(queries), maxRewardsBatch)}
	case req.Prompts != nil && len(req.Prompts) != len(queries):
		return nil, nil, badRewards("prompts: %d items for %d in %s (one per item)", len(req.Prompts), len(queries), field)
	case req.Labels != nil && len(req.Labels) != len(queries):
		return nil, nil, badRewards("labels: %d items for %d in %s (one per item)", len(req.Labels), len(queries), field)
	}
	ins := make([]*Input, len(queries))
	unsplit := []int{}
	for i, q := range queries {
		in := &Input{Update: q}
		if req.Prompts != nil && req.Prompts[i] != "" {
			p := req.Prompts[i]
			if at := strings.Index(q, p); at >= 0 {
				in.Query, in.Update = p, q[at+len(p):]
			} else {
				in.Query = p
				unsplit = append(unsplit, i)
			}
		}
		if req.Labels != nil {
			lc, err := decodeLabel(req.Labels[i])
			if err != nil {
				return nil, nil, badRewards("labels[%d]: %v", i, err)
			}
			in.Kind, in.Evolver, in.Agent, in.Benchmark = lc.Kind, lc.Evolver, lc.Agent, lc.Benchmark
		}
		ins[i] = in
	}
	return ins, unsplit, nil
}

// decodeLabel reads the critic's context from a label: a JSON object, or a
// string holding one, with only the fields of labelContext. Anything else
// gives the zero context.
func decodeLabel(raw json.RawMessage) (labelContext, error) {
	var lc labelContext
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return lc, err
		}
		s = strings.TrimSpace(s)
		if !strings.HasPrefix(s, "{") {
			return lc, nil
		}
		raw = []byte(s)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return lc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lc); err != nil {
		return lc, fmt.Errorf("a label object holds only kind, evolver, agent and benchmark (strings): %w", err)
	}
	return lc, nil
}

// handleRewards serves POST /v1/rewards.
func (t *Trainer) handleRewards(w http.ResponseWriter, r *http.Request) {
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
	var req RewardsRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRewardsBody))
	err = dec.Decode(&req)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("data after the JSON object")
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over the limit of %d bytes", maxRewardsBody))
			return
		}
		writeJSONError(w, http.StatusBadRequest, fmt.Errorf("decode request (a JSON object with query, prompts, labels): %w", err))
		return
	}
	if req.ModelVersion != nil {
		writeJSONError(w, http.StatusBadRequest, errPinInBody)
		return
	}
	if !t.checkProject(w, r, req.Project) {
		return
	}
	ins, unsplit, err := rewardInputs(&req)
	if err != nil {
		code := http.StatusBadRequest
		var re *rewardsError
		if errors.As(err, &re) {
			code = re.code
		}
		writeJSONError(w, code, err)
		return
	}
	if len(unsplit) > 0 {
		t.log.Warn().Int("items", len(ins)).Int("unsplit", len(unsplit)).Int("first", unsplit[0]).
			Msg("rewards: prompt not found in query; scored the whole query as the update")
	}
	scores, a, err := t.serve(ins, pin)
	if err != nil {
		writeServingError(w, err)
		return
	}
	out := Rewards{Rewards: make([]float64, len(scores)), Effects: make([]float64, len(scores)),
		ModelVersion: a.version, CheckpointSHA256: a.sha256, Warming: a.warming, Lambda: t.cfg.Lambda, Unsplit: unsplit}
	for i, s := range scores {
		out.Rewards[i], out.Effects[i] = s.Reward, s.Effect
		out.Features = s.Features
	}
	writeJSON(w, http.StatusOK, out)
}
