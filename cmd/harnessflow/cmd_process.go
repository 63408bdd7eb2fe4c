package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/processors"
)

func init() { register(newProcessCmd) }

// processorFlags binds the processor's tunables shared by process and replay.
func processorFlags(fs *pflag.FlagSet, cfg *processors.Config, brokers *string) {
	d := processors.DefaultConfig()
	fs.StringVar(brokers, "brokers", kafkax.DefaultBrokers, "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&cfg.Group, "group", d.Group, "consumer group of stage A (stage B uses <group>-pair)")
	fs.IntVar(&cfg.PendingMax, "pending-max", d.PendingMax, "events per partition that may wait for their cell_started; shared by project: when full, the project holding the most loses its oldest (dead-lettered)")
	fs.IntVar(&cfg.MaxOpenCells, "max-open-cells", d.MaxOpenCells, "unfinished cells one project may hold per partition; a cell_started past it is dead-lettered (limit/open_cells_cap)")
	fs.Int64Var(&cfg.MaxStateBytes, "max-state-bytes", d.MaxStateBytes, "state bytes (estimate) one project may hold per partition; an event past it is dead-lettered (limit/state_bytes_cap)")
	fs.DurationVar(&cfg.CellIdle, "cell-idle", d.CellIdle, "an unfinished cell with no event for this long (log or wall clock) ages out: its state is dropped and dead-lettered (limit/cell_idle)")
	fs.DurationVar(&cfg.PendingTimeout, "pending-timeout", d.PendingTimeout, "how long an event waits for its cell_started (log time, and wall time when idle)")
	fs.DurationVar(&cfg.Grace, "grace", d.Grace, "keep a finished cell's state this long before evicting it")
	fs.IntVar(&cfg.DLQPayloadCap, "dlq-payload-cap", d.DLQPayloadCap, "bytes of a bad input copied into its dead letter")
	fs.IntVar(&cfg.MinPairs, "min-pairs", d.MinPairs, "minimum tasks per side for a non-neutral label")
	fs.Float64Var(&cfg.Lambda, "lambda", d.Lambda, "stability penalty handed to the scorer")
	fs.IntVar(&cfg.BatchSize, "batch-size", d.BatchSize, "input messages per partition between write-then-commit points")
	fs.IntVar(&cfg.OutcomeBatch, "outcome-batch", d.OutcomeBatch, "admitted events of one pairing key packed into one hf.outcomes record per batch (1: one record per event, the format before batching; stage B reads both)")
	fs.IntVar(&cfg.FetchMaxBytes, "fetch-max-bytes", 0, "cap of one fetch response per topic partition; with one fetch read ahead per stream it bounds the input buffers (0: the default, 256 KiB)")
	fs.DurationVar(&cfg.FetchWait, "fetch-wait", d.FetchWait, "how long a fetch of an empty partition waits at the broker: how soon a drained sibling is seen at its end again for --merge-idle, and the pace of idle partitions' timeouts")
	fs.DurationVar(&cfg.FinishHold, "finish-hold", d.FinishHold, "hold each cell_finished this long (log clock, or wall clock when idle) so late updates and judgments of the cell are admitted before it; a later one re-emits the cell's figures (negative: off)")
	fs.DurationVar(&cfg.MergeIdle, "merge-idle", d.MergeIdle, "how long a message that arrived while a sibling raw topic partition was empty waits before it is merged past that partition")
	fs.StringVar(&cfg.Listen, "listen", "", "serve /metrics, /healthz and /readyz on this address (empty: none)")
	fs.StringVar(&cfg.SchemaRegistry, "schema-registry", "", schemaRegistryUsage)
}

// schemaRegistryUsage is the help of --schema-registry on every command
// that reads raw topics (process, replay, sink, consume, up).
const schemaRegistryUsage = "Confluent Schema Registry URL[,URL] through which Confluent-framed messages (0x00, schema id, Avro) are decoded (empty: none; they are dead-lettered decode/schema_registry)"

func runProcessor(cmd *cobra.Command, cfg processors.Config, brokers string, component string) error {
	cfg.Brokers = kafkax.ParseBrokers(brokers)
	log := obs.NewLogger(component)
	// The command serves --listen itself (processorsMux), from the start
	// and with a readiness check of the brokers, instead of the processor.
	listen := cfg.Listen
	cfg.Listen = ""
	p, err := processors.New(cfg, processors.WithLogger(log))
	if err != nil {
		return withCode(2, err)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	httpDone := make(chan error, 1)
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return withCode(1, fmt.Errorf("serve %s: %w", listen, err))
		}
		go func() {
			err := obs.ServeListener(ctx, ln, processorsMux(p, cfg.Brokers))
			if err != nil && ctx.Err() == nil {
				log.Error().Err(err).Str("listen", listen).Msg("metrics endpoint failed")
				cancel()
			}
			httpDone <- err
		}()
	} else {
		httpDone <- nil
	}
	log.Info().Strs("brokers", cfg.Brokers).Str("group", cfg.Group).Str("pair_group", processors.PairGroup(cfg.Group)).Msg("processor starting")
	err = p.Run(ctx)
	cancel()
	httpErr := <-httpDone
	if err == nil && httpErr != nil && cmd.Context().Err() == nil {
		err = fmt.Errorf("serve %s: %w", listen, httpErr)
	}
	if err != nil {
		if errors.Is(err, processors.ErrTopicLayout) {
			return withCode(2, err)
		}
		return withCode(1, err)
	}
	log.Info().Msg("processor stopped")
	return nil
}

// processorsMux is the processors' /metrics, /healthz and /readyz: ready
// once both stages run (Processor.Ready) and while a broker answers
// (check "kafka").
func processorsMux(p *processors.Processor, brokers []string) http.Handler {
	return obs.Mux(p.Registry(), nil, obs.WithReady("processors", p.Ready()),
		obs.WithCheck("kafka", func(ctx context.Context) error { return kafkax.Ping(ctx, brokers) }))
}

func newProcessCmd() *cobra.Command {
	var cfg processors.Config
	var brokers string
	cmd := &cobra.Command{
		Use:   "process",
		Short: "Validate raw events, re-key them, pair, score and label them (both processor stages)",
		Long: `process consumes the raw cell topics (hf.cells, hf.attempts, hf.skill-events,
hf.updates, hf.judgments) in consumer group --group and validates every event in
stages (decode, syntax, semantic); bad input goes to hf.dlq with its stage and
reason code. Admitted events are re-keyed by pairing key into hf.outcomes, which
a second stage (group <group>-pair) pairs with the baseline to write labeled
samples (hf.samples) and round metrics (hf.round-metrics). hf.campaigns is read
whole for each campaign's label parameters.

Several instances share the work through the consumer groups. Offsets are
committed only after the outputs they caused are acknowledged; state is rebuilt
from the log on every partition assignment, and every derived event has a
deterministic id, so a restart or a rebalance re-emits, at worst, identical
events. The raw cell topics must keep equal partition counts.

Raw events are Avro single-object encoded, or Confluent-framed (0x00, schema id,
Avro) when --schema-registry names the registry that resolves their ids; an id
it does not have is dead-lettered decode/unknown_schema_id, and while it cannot
be reached nothing is dead-lettered: the partition's work waits and restarts.`,
		Example: "  harnessflow process --brokers 127.0.0.1:9092 --listen 127.0.0.1:9465",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProcessor(cmd, cfg, brokers, "process")
		},
	}
	processorFlags(cmd.Flags(), &cfg, &brokers)
	return cmd
}
