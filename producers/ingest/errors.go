package ingest

import "errors"

// Sentinel errors.
var (
	// ErrNoTokens is returned by New when neither Tokens nor TokensFile give a
	// token: the gateway never accepts anonymous events.
	ErrNoTokens = errors.New("ingest needs at least one token: pass --tokens FILE (lines \"TOKEN PROJECT\")")
	// ErrBadTokensFile wraps every problem of a tokens file.
	ErrBadTokensFile = errors.New("bad tokens file")
)
