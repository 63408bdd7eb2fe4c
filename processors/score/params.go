package score

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// Params are the labeling parameters of a campaign (schemas.CampaignDeclared)
// plus config.
type Params struct {
	// Epsilon is the minimum |effect| of a non-neutral label (campaign
	// label_epsilon). Default: 0.02.
	Epsilon float64
	// Alpha is the significance level of the label test; intervals are at
	// level 1−Alpha (campaign label_alpha). Default: 0.05.
	Alpha float64
	// MinPairs is the minimum number of tasks on each side for a non-neutral
	// label. Default: 5.
	MinPairs int
	// Lambda is the stability penalty (not used by this package, carried for
	// the stability views and the trainer). Default: 1.
	Lambda float64
	// Project is the envelope project of derived events. Default: "" (none).
	Project string
}

// SetDefaults fills zero fields with their defaults.
func (p *Params) SetDefaults() {
	if p.Epsilon == 0 {
		p.Epsilon = 0.02
	}
	if p.Alpha == 0 {
		p.Alpha = 0.05
	}
	if p.MinPairs == 0 {
		p.MinPairs = 5
	}
	if p.Lambda == 0 {
		p.Lambda = 1
	}
}

// Validate reports every problem of p (after SetDefaults), joined; each wraps
// ErrBadParams.
func (p Params) Validate() error {
	var errs []error
	if !(p.Epsilon >= 0 && p.Epsilon <= 1) {
		errs = append(errs, fmt.Errorf("%w: epsilon %v not in [0, 1]", ErrBadParams, p.Epsilon))
	}
	if !(p.Alpha > 0 && p.Alpha < 1) {
		errs = append(errs, fmt.Errorf("%w: alpha %v not in (0, 1)", ErrBadParams, p.Alpha))
	}
	if p.MinPairs < 1 {
		errs = append(errs, fmt.Errorf("%w: min pairs %d < 1", ErrBadParams, p.MinPairs))
	}
	if !(p.Lambda >= 0) {
		errs = append(errs, fmt.Errorf("%w: lambda %v < 0", ErrBadParams, p.Lambda))
	}
	return errors.Join(errs...)
}

// PairingKey returns the key that pairs a cell with its baseline:
// "project/campaign_id/benchmark/agent_model/seed". The project has its '%'
// and '/' escaped (%25, %2F), so that the first '/' ends it and no two
// projects share a key: unescaped, project "acme/c1" with campaign "swe" and
// agent "llama" would pair with project "acme", campaign "c1", benchmark
// "swe", agent "meta/llama". Keys of projects without those bytes read as
// they always did (agent names such as "meta/llama" stay as they are).
func PairingKey(project string, c *schemas.CellStarted) string {
	return keyPart(project) + "/" + c.CampaignID + "/" + c.Benchmark + "/" + c.AgentModel + "/" + strconv.FormatInt(int64(c.Seed), 10)
}

// legacyPairingKey is PairingKey as released before its project was
// escaped: the key of hf.outcomes records that an older stage A wrote and a
// newer stage B reads during an upgrade.
func legacyPairingKey(project string, c *schemas.CellStarted) string {
	return project + "/" + c.CampaignID + "/" + c.Benchmark + "/" + c.AgentModel + "/" + strconv.FormatInt(int64(c.Seed), 10)
}

func keyPart(s string) string {
	if !strings.ContainsAny(s, "%/") {
		return s
	}
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(s)
}
