package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

func init() { register(newProduceCmd) }

func newProduceCmd() *cobra.Command {
	var brokers, project, source string
	var connectTimeout, progress time.Duration
	cmd := &cobra.Command{
		Use:   "produce [FILE|-]",
		Short: "Validate JSONL events and produce the valid ones to Kafka",
		Long: `produce reads events in their JSON form, one per line (JSONL), from FILE or
standard input, validates every line and produces the valid ones to their topics,
keyed by cell_id. Each invalid line is reported on stderr as "line N: <reason>";
blank lines are skipped. A final line "produced P, rejected R" follows.

Exit status: 0 when every line was produced, 1 when some lines were rejected,
2 on usage errors, connection errors or events the brokers did not acknowledge.`,
		Example: "  harnessflow produce --brokers 127.0.0.1:9092 --project demo events.jsonl\n  gen-events | harnessflow produce --brokers 127.0.0.1:9092 -",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := cmd.InOrStdin()
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return withCode(2, err)
				}
				defer f.Close()
				in = f
			}
			bl := kafkax.ParseBrokers(brokers)
			ctx := cmd.Context()
			if err := kafkax.WaitReachable(ctx, bl, connectTimeout); err != nil {
				return withCode(2, err)
			}
			if err := kafkax.EnsureAllTopics(ctx, bl); err != nil {
				return withCode(2, err)
			}
			return runProduce(ctx, cmd.ErrOrStderr(), in, produceOptions{
				brokers: bl, project: project, source: source, progress: progress,
			})
		},
	}
	cmd.Flags().StringVar(&brokers, "brokers", "127.0.0.1:9092", "Kafka brokers, host:port[,host:port]")
	cmd.Flags().StringVar(&project, "project", "", "project to set on events that have none")
	cmd.Flags().StringVar(&source, "source", "produce", "source to set on events that have none")
	cmd.Flags().DurationVar(&connectTimeout, "connect-timeout", 10*time.Second, "how long to wait for a reachable broker")
	cmd.Flags().DurationVar(&progress, "progress", time.Second, "interval of progress lines on stderr (0: none)")
	return cmd
}

type produceOptions struct {
	brokers         []string
	project, source string
	progress        time.Duration
}

// runProduce reads JSONL from in and produces every valid line.
func runProduce(ctx context.Context, stderr io.Writer, in io.Reader, o produceOptions) error {
	log := obs.NewLogger("produce")
	// OnError runs on the producer's goroutines: stderr is shared.
	stderr = &produceStderr{w: stderr}
	var undelivered atomic.Int64
	p, err := producers.New(producers.Config{
		Brokers: o.brokers, Project: o.project, Source: o.source,
		OnError: func(ev schemas.Event, err error) {
			// The summary's exit status counts these.
			if undelivered.Add(1) <= 10 {
				fmt.Fprintf(stderr, "event %s (%s): not delivered: %v\n", ev.Header().EventID, ev.Type(), err)
			}
		},
	}, producers.WithLogger(log))
	if err != nil {
		return withCode(2, err)
	}
	var lines, rejected atomic.Int64
	start := time.Now()
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if o.progress <= 0 {
			return
		}
		t := time.NewTicker(o.progress)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				s := p.Stats()
				el := time.Since(start).Seconds()
				fmt.Fprintf(stderr, "progress: read %d lines, produced %d, rejected %d, %.0f events/s\n",
					lines.Load(), s.Delivered, rejected.Load(), float64(s.Delivered)/el)
			}
		}
	}()

	lim := schemas.DefaultLimits()
	r := bufio.NewReaderSize(in, 1<<20)
	var readErr error
	for n := 1; ctx.Err() == nil; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			lines.Add(1)
			line = bytes.TrimSpace(line)
			if len(line) > 0 {
				ev, perr := schemas.ParseJSON(line, lim)
				if perr == nil {
					perr = p.Emit(ctx, ev)
					var ie *producers.InvalidEventError
					if errors.As(perr, &ie) {
						perr = ie.Err
					}
				}
				if perr != nil && ctx.Err() == nil {
					rejected.Add(1)
					fmt.Fprintf(stderr, "line %d: %v\n", n, perr)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	closeErr := p.Close(cctx)
	close(stopProgress)
	<-progressDone
	s := p.Stats()
	fmt.Fprintf(stderr, "produced %d, rejected %d\n", s.Delivered, rejected.Load())
	log.Info().Int64("lines", lines.Load()).Uint64("produced", s.Delivered).Int64("rejected", rejected.Load()).
		Uint64("undelivered", s.Failed).Dur("took", time.Since(start)).Msg("produce finished")
	switch {
	case readErr != nil:
		return withCode(2, fmt.Errorf("read input: %w", readErr))
	case ctx.Err() != nil:
		return withCode(2, fmt.Errorf("interrupted: %w", ctx.Err()))
	case closeErr != nil || s.Failed > 0:
		return withCode(2, fmt.Errorf("not every event was acknowledged: %v", closeErr))
	case rejected.Load() > 0:
		return withCode(1, nil)
	}
	return nil
}

// produceStderr serializes writes from several goroutines.
type produceStderr struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *produceStderr) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
