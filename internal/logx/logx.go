// Package logx builds harnessflow's zerolog loggers: JSON lines on stderr with a
// component field. HF_LOG_LEVEL (debug, info, warn, error) sets the level;
// default info.
package logx

import (
	"os"
	"time"

	"github.com/rs/zerolog"
)

func init() {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	lvl, err := zerolog.ParseLevel(os.Getenv("HF_LOG_LEVEL"))
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	zerolog.SetGlobalLevel(lvl)
}

// New returns a JSON logger on stderr tagged with component.
func New(component string) zerolog.Logger {
	return zerolog.New(os.Stderr).With().Timestamp().Str("component", component).Logger()
}

// Nop returns a logger that discards everything (tests).
func Nop() zerolog.Logger { return zerolog.Nop() }
