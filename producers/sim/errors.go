package sim

import "errors"

// Sentinel errors.
var (
	// ErrConfig wraps every configuration problem reported by Config.Validate.
	ErrConfig = errors.New("invalid simulator config")
	// ErrUnknownModel is returned for an agent or evolver nickname the
	// generative model has no calibration for.
	ErrUnknownModel = errors.New("unknown model nickname")
	// ErrUnknownBenchmark is returned for a benchmark other than swe, mcp, sb.
	ErrUnknownBenchmark = errors.New("unknown benchmark")
)
