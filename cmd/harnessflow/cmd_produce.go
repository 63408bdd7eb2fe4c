package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/producers/jsonl"
)

func init() { register(newProduceCmd) }

func newProduceCmd() *cobra.Command {
	var cfg jsonl.Config
	var brokers string
	cmd := &cobra.Command{
		Use:   "produce [FILE|-]",
		Short: "Validate JSONL events and produce the valid ones to Kafka",
		Long: `produce reads events in their JSON form, one per line (JSONL), from FILE or
standard input, validates every line and produces the valid ones to their topics,
keyed by cell_id. Each invalid line is reported on stderr as "line N: <reason>";
blank lines are skipped. A final line "produced P, rejected R" follows.
Events are Avro single-object encoded; with --schema-registry URL they are
written in the Confluent wire format instead, their schemas registered there.

Only producer event types are accepted (campaign_declared, cell_started,
task_attempt, skill_event, harness_update, adherence_judgment, cell_finished): a
line of a type the pipeline derives itself (labeled_sample, round_metrics,
rejected, checkpoint_published) is rejected, naming its type, unless
--allow-internal-types is given. That flag is for tests and repair: such an
event replaces what the pipeline derived.

Exit status: 0 when every line was produced, 1 when some lines were rejected,
2 on usage errors, connection errors (brokers, schema registry) or events the
brokers did not acknowledge.`,
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
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			err := jsonl.Produce(cmd.Context(), cfg, in, cmd.ErrOrStderr())
			switch {
			case err == nil:
				return nil
			case errors.Is(err, jsonl.ErrRejected):
				// Each rejected line is already on stderr.
				return withCode(1, nil)
			}
			return withCode(2, err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, host:port[,host:port]")
	f.StringVar(&cfg.Project, "project", "", "project to set on events that have none")
	f.StringVar(&cfg.Source, "source", jsonl.DefaultSource, "source to set on events that have none")
	f.DurationVar(&cfg.ConnectTimeout, "connect-timeout", jsonl.DefaultConnectTimeout, "how long to wait for a reachable broker")
	f.StringVar(&cfg.SchemaRegistry, "schema-registry", "", "schema registry URL: write the Confluent wire format, registering the schemas there (empty: Avro single-object encoding)")
	f.BoolVar(&cfg.AllowInternalTypes, "allow-internal-types", false, "also produce the pipeline's derived types (labeled_sample, round_metrics, rejected, checkpoint_published): for tests and repair only")
	f.DurationVar(&cfg.Progress, "progress", jsonl.DefaultProgress, "interval of progress lines on stderr (0: none)")
	return cmd
}
