package trainer

import "sync"

// VerdictBeats is the evaluation verdict of a checkpoint that beats its
// baselines (trainer/eval's VerdictBeats; trainer cannot import trainer/eval,
// so a test there checks the two are equal). Until the served checkpoint has
// this verdict, /v1/score and /v1/rewards answer "warming": true.
const VerdictBeats = "beats baselines"

// servingState is what /v1/score and /v1/rewards answer from: the weights of
// a published checkpoint, never the live ones, and the evaluation verdict
// of each checkpoint.
type servingState struct {
	mu sync.Mutex
	// version, sha256 and path name the served checkpoint ("" before one is
	// published or restored).
	version, sha256, path string
	// models are the served checkpoint's weights (nil before one).
	models []*Model
	// verdicts maps a model version to its evaluation verdict.
	verdicts map[string]string
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
