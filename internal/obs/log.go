package obs

import (
	"os"
	"time"

	"github.com/rs/zerolog"
)

// HF_LOG_LEVEL (debug, info, warn, error) sets the level of every logger;
// default info.
func init() {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	lvl, err := zerolog.ParseLevel(os.Getenv("HF_LOG_LEVEL"))
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	zerolog.SetGlobalLevel(lvl)
}

// NewLogger returns harnessflow's logger: JSON lines on stderr with a
// timestamp and a component field.
func NewLogger(component string) zerolog.Logger {
	return zerolog.New(os.Stderr).With().Timestamp().Str("component", component).Logger()
}
