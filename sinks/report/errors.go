package report

import "errors"

// Sentinel errors.
var (
	// ErrNoCampaign is returned by Build when no campaign id is given and the
	// database holds no campaign, or the given campaign has no cell.
	ErrNoCampaign = errors.New("no campaign to report")
)
