package chaos

import "errors"

// Sentinel errors of the chaos campaign.
var (
	// ErrConfig wraps every problem Config.Validate reports.
	ErrConfig = errors.New("chaos config")
	// ErrFailed is returned (wrapped, with the failed checks) by Report.Err
	// when an assertion of the campaign failed: the run finished, but data
	// was lost, duplicated, dead-lettered wrongly or differs from the
	// uninterrupted reference.
	ErrFailed = errors.New("chaos campaign failed")
)
