package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/sinks/jsonl"
)

func init() { register(newConsumeCmd) }

func newConsumeCmd() *cobra.Command {
	var cfg jsonl.Config
	var brokers string
	cmd := &cobra.Command{
		Use:   "consume --topic TOPIC",
		Short: "Print a topic's events as JSONL (the kcat of harnessflow)",
		Long: `consume reads every partition of one topic (no consumer group, nothing committed),
decodes each message, DLQ included, and prints its JSON form, one event per line,
on stdout. Without --from-beginning it starts at the end of each partition as of
start-up. It exits after --max events, after --idle-timeout without a new message,
or on SIGINT/SIGTERM. A message that does not decode is reported on stderr with
its topic, partition and offset, and skipped; when none of the messages read
decodes, consume exits 1 (it printed nothing). On hf.outcomes, the processors'
internal topic, each event of a batched record ("HFB\x01" framing, see
docs/design.md) is printed on its own line.

A dead letter (hf.dlq, "type":"rejected") is printed with its fields (stage,
reason_code, message, which starts with the entity it is about, such as
"update u-17 (cell c-3): ", source_topic, partition, offset, and payload, the
offending bytes in base64), then what the payload holds:
  payload_event  the payload decoded, in its JSON form (Avro single-object;
                 Confluent framing with --schema-registry; JSON text that
                 parses as an event)
  payload_error  otherwise, why it does not decode (cut at the payload cap,
                 not an event, Confluent framing without --schema-registry)
  payload_text   with payload_error, the payload as text when it is
                 printable UTF-8 (JSON text, a log line)`,
		Example: "  harnessflow consume --brokers 127.0.0.1:9092 --topic hf.dlq --from-beginning --idle-timeout 2s",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			if err := jsonl.Consume(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr()); err != nil {
				if errors.Is(err, jsonl.ErrNothingDecoded) {
					return withCode(1, err)
				}
				return withCode(2, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, host:port[,host:port]")
	f.StringVar(&cfg.Topic, "topic", "", "topic to read (e.g. hf.attempts, hf.dlq)")
	f.BoolVar(&cfg.FromBeginning, "from-beginning", false, "start at the first stored offset instead of the end")
	f.IntVar(&cfg.Max, "max", 0, "exit after this many events (0: no limit)")
	f.DurationVar(&cfg.Idle, "idle-timeout", 0, "exit after this long without a new message (0: never)")
	f.StringVar(&cfg.SchemaRegistry, "schema-registry", "", "Confluent Schema Registry URL[,URL] through which Confluent-framed messages (0x00, schema id, Avro) are decoded (empty: none; they are reported undecodable)")
	f.DurationVar(&cfg.ConnectTimeout, "connect-timeout", jsonl.DefaultConnectTimeout, "how long to wait for a reachable broker")
	return cmd
}
