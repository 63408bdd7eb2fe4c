// Command harnessflow is the one binary of harnessflow: one subcommand per
// component (docs/design.md §1). Run `harnessflow --help` for the list.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/obs"
)

// exitError carries a process exit status through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that main exits with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// subcommands are registered by the cmd_*.go files' init functions.
var subcommands []func() *cobra.Command

func register(f func() *cobra.Command) { subcommands = append(subcommands, f) }

// benchSubcommands are the children of `harnessflow bench`, registered by the
// cmd_bench_*.go files.
var benchSubcommands []func() *cobra.Command

func registerBench(f func() *cobra.Command) { benchSubcommands = append(benchSubcommands, f) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "harnessflow",
		Short: "Event-sourced streaming pipeline for self-evolving LLM agents",
		Long: `harnessflow validates agent and benchmark events, scores every harness update
against a paired baseline, labels it with its statistical evidence, computes the
harness-updating and harness-benefit capabilities per round, writes every figure to
ClickHouse and feeds labeled samples to a continuously running trainer.

Every flag can also be set by an environment variable: HF_ plus the flag name in
upper case with dashes as underscores (--brokers -> HF_BROKERS). Logs go to
stderr, human-readable on a terminal and JSON lines otherwise (--log-format);
HF_LOG_LEVEL sets their level (debug, info, warn, error; default info).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, f := range subcommands {
		root.AddCommand(f())
	}
	var sec security
	sec.flags(root)
	logFormat := root.PersistentFlags().String("log-format", "auto",
		"log lines as "+obs.LogFormats+" (auto: console on a terminal, JSON otherwise)")
	bindEnv(root, func() error {
		if err := obs.SetLogFormat(*logFormat); err != nil {
			return fmt.Errorf("--log-format: %w", err)
		}
		return sec.apply()
	})
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// The first Ctrl-C or SIGTERM starts the clean stop (drain, flush,
		// commit). Unregistering then gives the signals back their default
		// action, so a second one ends the process at once, for when a
		// drain waits on something that will not come back.
		<-ctx.Done()
		stop()
	}()
	err := newRoot().ExecuteContext(ctx)
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "harnessflow:", ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "harnessflow:", err)
	os.Exit(2)
}
