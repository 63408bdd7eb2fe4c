package trainer

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// A per-project trainer (Config.Project set) trains one project's model:
// intake skips every other project's sample before it touches any state
// (the frontier still moves past it), so another tenant's samples can
// neither train nor evaluate the model, fill its duplicate, staleness,
// replay or held-out windows, nor be dead-lettered by it; the critic_evals
// rows and checkpoints carry the project; and /v1/score and /v1/rewards
// refuse (403) a request that names another project. The score token of
// such a trainer is its project's: give each project's clients only the
// token of their project's trainer.

// sampleProject is s's project, schemas.DefaultProject when it names none.
func sampleProject(s *schemas.LabeledSample) string {
	if s.Project == "" {
		return schemas.DefaultProject
	}
	return s.Project
}

// foreign says whether s is another project's than the trainer's (never
// for a trainer of all projects).
func (t *Trainer) foreign(s *schemas.LabeledSample) bool {
	return t.cfg.Project != AllProjects && sampleProject(s) != t.cfg.Project
}

// errProjectParam refuses a project given twice in one request.
var errProjectParam = errors.New("project: given more than once in the URL; give one (e.g. ?project=acme)")

// requestProject is the project a /v1/score or /v1/rewards request names:
// the URL's ?project= or the JSON body's project field (body), "" when it
// names none. Both given and different is an error.
func requestProject(r *http.Request, body string) (string, error) {
	vs := r.URL.Query()["project"]
	if len(vs) > 1 {
		return "", errProjectParam
	}
	p := strings.TrimSpace(body)
	if len(vs) == 1 {
		q := strings.TrimSpace(vs[0])
		if p != "" && q != p {
			return "", fmt.Errorf("project: the URL names %q and the body %q; give one", q, p)
		}
		p = q
	}
	return p, nil
}

// checkProject answers 403 and returns false when the request names a
// project other than the one this trainer serves (Config.Project); a
// trainer of all projects serves any, and a request that names none is
// answered by whichever trainer its token reaches.
func (t *Trainer) checkProject(w http.ResponseWriter, r *http.Request, body string) bool {
	p, err := requestProject(r, body)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err)
		return false
	}
	if p == "" || t.cfg.Project == AllProjects || p == t.cfg.Project {
		return true
	}
	writeJSONError(w, http.StatusForbidden, fmt.Errorf("project %q: trainer %s serves project %q only (its model is trained on that project's samples alone); send the request to project %q's trainer, with its score token", p, t.cfg.Name, t.cfg.Project, p))
	return false
}

// projectDesc names a Config.Project in messages.
func projectDesc(p string) string {
	if p == AllProjects {
		return "every project's samples (no --project)"
	}
	return fmt.Sprintf("project %q's samples (--project %s)", p, p)
}
