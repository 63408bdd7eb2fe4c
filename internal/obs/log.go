package obs

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// HF_LOG_LEVEL (debug, info, warn, error) sets the level of every logger;
// default info. HF_LOG_FORMAT (auto, json, console) sets their format;
// default auto (SetLogFormat).
func init() {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	lvl, err := zerolog.ParseLevel(os.Getenv("HF_LOG_LEVEL"))
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	zerolog.SetGlobalLevel(lvl)
	if SetLogFormat(os.Getenv("HF_LOG_FORMAT")) != nil {
		_ = SetLogFormat("auto")
	}
}

// LogFormats are the values SetLogFormat takes.
const LogFormats = "auto, json or console"

var consoleLogs atomic.Bool

// SetLogFormat chooses how loggers made afterwards write: "json" (one JSON
// object a line, for log collectors), "console" (zerolog's human-readable
// lines) or "auto" (or ""): console when stderr is a terminal, JSON
// otherwise (a file, a pipe, a container's log).
func SetLogFormat(format string) error {
	switch format {
	case "", "auto":
		consoleLogs.Store(isTerminal(os.Stderr))
	case "json":
		consoleLogs.Store(false)
	case "console":
		consoleLogs.Store(true)
	default:
		return fmt.Errorf("log format %q: want %s", format, LogFormats)
	}
	return nil
}

// NewLogger returns harnessflow's logger on stderr, with a timestamp and a
// component field, in the format SetLogFormat chose.
func NewLogger(component string) zerolog.Logger { return newLogger(os.Stderr, component) }

func newLogger(w io.Writer, component string) zerolog.Logger {
	if consoleLogs.Load() {
		// Colours only on a terminal (a console format forced into a file
		// stays plain text).
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(os.Stderr)}
	}
	return zerolog.New(w).With().Timestamp().Str("component", component).Logger()
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
