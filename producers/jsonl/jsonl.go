// Package jsonl is the producers' JSON-lines input (`harnessflow produce`):
// it reads events in their JSON form, one per line, validates every line,
// produces the valid ones to their topics through a producers.Producer and
// reports each invalid line — the mirror of sinks/jsonl.
package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

// Defaults of Config's fields.
const (
	DefaultSource         = "produce"
	DefaultProgress       = time.Second
	DefaultConnectTimeout = kafkax.DefaultConnectTimeout
)

// closeTimeout bounds the final delivery of what is still buffered.
const closeTimeout = 60 * time.Second

// maxUndeliveredReports caps the "not delivered" lines written to stderr
// (every undelivered event still counts in the outcome).
const maxUndeliveredReports = 10

// ErrRejected is returned (wrapped) when some lines were rejected and every
// valid one was produced: `harnessflow produce` exits 1 on it, 2 on any other
// error.
var ErrRejected = errors.New("some lines were rejected")

// Config says where Produce writes and what it fills in.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Project is set on events that have none. Default: "" (none).
	Project string
	// Source is set on events that have none. Default: "" (the producer's
	// own default, "sdk-go"); `harnessflow produce` passes DefaultSource.
	Source string
	// Progress is the interval of progress lines on stderr. Default: 0 (none);
	// `harnessflow produce` passes DefaultProgress.
	Progress time.Duration
	// ConnectTimeout is how long to wait for a reachable broker.
	// Default: DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// SchemaRegistry is a schema registry URL: events are then written in
	// the Confluent wire format, their schemas registered there
	// (producers.WithSchemaRegistry). Default: "" (Avro single-object
	// encoding, no registry).
	SchemaRegistry string
	// AllowInternalTypes lets lines of the pipeline's own derived types
	// (labeled_sample, round_metrics, rejected, checkpoint_published) be
	// produced (producers.WithInternalTypes), for tests and repair; without
	// it each such line is rejected, naming its type. Default: false.
	AllowInternalTypes bool
}

// counts are a run's line counters, read by the progress reporter while the
// reader updates them.
type counts struct {
	lines, rejected atomic.Int64
}

// Produce reads JSONL from in and produces every valid line. It waits for a
// reachable broker and creates the topics first. Each invalid line is
// reported on stderr as "line N: <reason>", blank lines are skipped, and a
// final line "produced P, rejected R" follows. It returns nil when every line
// was produced, an error wrapping ErrRejected when some lines were rejected,
// and any other error for a broker or schema registry that cannot be
// reached, an unreadable input, the end of ctx, or events the brokers did not
// acknowledge.
func Produce(ctx context.Context, cfg Config, in io.Reader, stderr io.Writer) error {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if err := kafkax.WaitReachable(ctx, cfg.Brokers, cfg.ConnectTimeout); err != nil {
		return err
	}
	if err := kafkax.EnsureAllTopics(ctx, cfg.Brokers); err != nil {
		return err
	}
	log := obs.NewLogger("produce")
	// OnError runs on the producer's goroutines: stderr is shared.
	stderr = &lockedWriter{w: stderr}
	opts := []producers.Option{producers.WithLogger(log)}
	if cfg.AllowInternalTypes {
		opts = append(opts, producers.WithInternalTypes())
	}
	if cfg.SchemaRegistry != "" {
		opts = append(opts, producers.WithSchemaRegistry(schemas.NewRegistry(cfg.SchemaRegistry, nil)))
	}
	var undelivered atomic.Int64
	p, err := producers.New(producers.Config{
		Brokers: cfg.Brokers, Project: cfg.Project, Source: cfg.Source,
		OnError: func(ev schemas.Event, err error) {
			// The outcome counts these.
			if undelivered.Add(1) <= maxUndeliveredReports {
				fmt.Fprintf(stderr, "event %s (%s): not delivered: %v\n", ev.Header().EventID, ev.Type(), err)
			}
		},
	}, opts...)
	if err != nil {
		return err
	}
	var c counts
	start := time.Now()
	stopProgress := reportProgress(stderr, cfg.Progress, p, &c, start)
	linesErr := emitLines(ctx, p, in, stderr, &c)
	cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	closeErr := p.Close(cctx)
	stopProgress()
	s := p.Stats()
	fmt.Fprintf(stderr, "produced %d, rejected %d\n", s.Delivered, c.rejected.Load())
	logFinished(log, &c, s, start)
	switch {
	case linesErr != nil:
		return linesErr
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", ctx.Err())
	case closeErr != nil || s.Failed > 0:
		return fmt.Errorf("not every event was acknowledged: %w", closeErr)
	case c.rejected.Load() > 0:
		return fmt.Errorf("%w: %d of %d lines", ErrRejected, c.rejected.Load(), c.lines.Load())
	}
	return nil
}

// emitLines reads in line by line until its end or the end of ctx, parses
// each non-blank line and emits it to p; a line that does not parse or that
// Emit refuses is counted rejected and reported on stderr. It returns a read
// error other than EOF, or the first schema registry failure (which no
// later line would escape): both end the reading.
func emitLines(ctx context.Context, p *producers.Producer, in io.Reader, stderr io.Writer, c *counts) error {
	lim := schemas.DefaultLimits()
	r := bufio.NewReaderSize(in, 1<<20)
	for n := 1; ctx.Err() == nil; n++ {
		line, long, err := readLine(r, nil, lim.Event)
		if long {
			c.lines.Add(1)
			c.rejected.Add(1)
			fmt.Fprintf(stderr, "line %d: longer than the %d-byte event cap: skipped\n", n, lim.Event)
		} else if len(line) > 0 {
			c.lines.Add(1)
			line = bytes.TrimSpace(line)
			if len(line) > 0 {
				ev, perr := schemas.ParseJSON(line, lim)
				if perr == nil {
					perr = p.Emit(ctx, ev)
					if errors.Is(perr, producers.ErrSchemaRegistry) && ctx.Err() == nil {
						return fmt.Errorf("line %d: %w", n, perr)
					}
					var ie *producers.InvalidEventError
					if errors.As(perr, &ie) {
						perr = ie.Err
					}
				}
				if perr != nil && ctx.Err() == nil {
					c.rejected.Add(1)
					fmt.Fprintf(stderr, "line %d: %v\n", n, perr)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return fmt.Errorf("read input: %w", err)
			}
			return nil
		}
	}
	return nil
}

// readLine appends the next line of r (up to and including its '\n') to
// buf and returns it. A line longer than max is not held: the rest of it is
// read and dropped, and long is true (line then holds its first bytes only).
// err is r's error (io.EOF at the end, with the last line if it has no
// '\n').
func readLine(r *bufio.Reader, buf []byte, max int) (line []byte, long bool, err error) {
	for {
		frag, err := r.ReadSlice('\n')
		if !long {
			if len(buf)+len(frag) > max {
				long = true
			} else {
				buf = append(buf, frag...)
			}
		}
		if err != bufio.ErrBufferFull {
			return buf, long, err
		}
	}
}

// logFinished logs the run's totals.
func logFinished(log zerolog.Logger, c *counts, s producers.Stats, start time.Time) {
	log.Info().Int64("lines", c.lines.Load()).Uint64("produced", s.Delivered).Int64("rejected", c.rejected.Load()).
		Uint64("undelivered", s.Failed).Dur("took", time.Since(start)).Msg("produce finished")
}
