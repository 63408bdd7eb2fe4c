package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/processors"
)

func init() { register(newTopicsCmd) }

// raiseHelp is what raising partitions means for the pipeline: the --help
// of `topics raise` and the warning it prints.
const raiseHelp = `What raising means for cells in flight. A message's partition is a hash of
its key modulo the partition count (FNV-1a, kafka-go's Hash balancer, for
every harnessflow writer; Java clients' default is murmur2 with the same
effect), so after a raise most keys map to another partition than before,
while what was written stays where it is. Keys: the cell id on the raw cell
topics and the derived topics, the pairing key
(project/campaign/benchmark/agent_model/seed) on hf.outcomes.

The processors keep no state across partitions: each member rebuilds a
partition's cell state from that partition's own log when it is assigned
(a rebalance moves partitions between instances without losing anything).
Nothing moves a cell's earlier events to its new partition, so:

  raw cell topics  a cell open during the raise is split: the member owning
                   its new partition sees its later updates, attempts and
                   cell_finished without its cell_started, holds them as
                   pending, then dead-letters them (unknown_cell); the old
                   partition never sees the cell finish. The samples and
                   round metrics that need its later events are never
                   produced. The five raw cell topics are
                   raised together (the processors refuse unequal counts:
                   co-partitioning).
  hf.outcomes      a pairing key spans a whole campaign: every campaign in
                   flight loses its pairing the same way.
  derived topics   (hf.samples, hf.round-metrics, hf.dlq, hf.checkpoints) a
                   key's later records go to another partition; the sink
                   deduplicates by id, but the key's order across the two
                   partitions is lost.
  hf.campaigns     read whole by every processor, from the partitions it
                   found at start: restart the processors after a raise.

So raise between campaigns, when no cell is open: stop the producers, wait
until the processors' lag is 0 (hf_process_commit_lag), raise,
restart the processors (they check the raw topics' co-partitioning at
start). Kafka cannot lower a partition count: the command refuses.`

func newTopicsCmd() *cobra.Command {
	var brokers string
	var connect time.Duration
	cmd := &cobra.Command{
		Use:   "topics [list]",
		Short: "Show each harnessflow topic's partitions and replication, declared and actual; raise partitions",
		Long: `topics lists every harnessflow topic (infra/kafkatopics) as the cluster holds it:
its partitions and replication factor beside the declared ones, and the cluster's
broker count. A topic the cluster lacks is "missing" (any component creates it at
start); one with fewer replicas than declared is "under-replicated" (created
with --kafka-replication-factor or on a smaller cluster: existing topics are
never changed), or "one broker" when the cluster has a single broker, which
holds one replica by design (the embedded broker of harnessflow up).

Topics are created with their declared replication factor (3). On a cluster
with fewer brokers creation fails, naming the topics and the broker count:
add brokers or pass --kafka-replication-factor N (env
HF_KAFKA_REPLICATION_FACTOR) to create every topic with N replicas. The
embedded broker (harnessflow broker, harnessflow up) creates them with one.

topics raise TOPIC N raises a topic's partition count; topics groups shows each
consumer group's committed offsets and lag; see their --help.`,
		Example:   "  harnessflow topics --brokers 127.0.0.1:9092\n  harnessflow topics raise hf.samples 12",
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"list"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && args[0] != "list" {
				return withCode(2, fmt.Errorf("unknown topics subcommand %q: want list, raise or groups", args[0]))
			}
			client, err := topicsClient(cmd.Context(), brokers, connect)
			if err != nil {
				return withCode(2, err)
			}
			return listTopics(cmd.Context(), cmd.OutOrStdout(), client, obs.NewLogger("topics"))
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, host:port[,host:port]")
	pf.DurationVar(&connect, "connect-timeout", kafkax.DefaultConnectTimeout, "how long to wait for a reachable broker")
	cmd.AddCommand(newTopicsListCmd(cmd), newTopicsRaiseCmd(&brokers, &connect), newTopicsGroupsCmd(&brokers, &connect))
	return cmd
}

func newTopicsListCmd(parent *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Show each harnessflow topic's partitions and replication, declared and actual (the default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return parent.RunE(cmd, nil)
		},
	}
}

func newTopicsRaiseCmd(brokers *string, connect *time.Duration) *cobra.Command {
	var partitions int
	cmd := &cobra.Command{
		Use:   "raise TOPIC [N]",
		Short: "Raise a topic's partition count (never lowers it)",
		Long: `raise raises TOPIC's partition count to N (or --partitions N) with Kafka's
CreatePartitions. N equal to the current count changes nothing; a lower N is
refused, since Kafka cannot remove partitions. Naming any raw cell topic
(` + fmt.Sprint(processors.CellTopics) + `) raises all five.

` + raiseHelp,
		Example: "  harnessflow topics raise hf.samples 12\n  harnessflow topics raise hf.attempts --partitions 12   # raises the five raw cell topics",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := partitions
			if len(args) == 2 {
				v, err := strconv.Atoi(args[1])
				if err != nil {
					return withCode(2, fmt.Errorf("partition count %q: want a whole number", args[1]))
				}
				if cmd.Flags().Changed("partitions") && v != partitions {
					return withCode(2, fmt.Errorf("partition count given twice (%d and --partitions %d): give one", v, partitions))
				}
				n = v
			}
			if n < 1 {
				return withCode(2, errors.New("raise needs the new partition count: harnessflow topics raise TOPIC N"))
			}
			topic := args[0]
			if _, ok := kafkatopics.Lookup(topic); !ok {
				return withCode(2, fmt.Errorf("%s is no harnessflow topic (harnessflow topics lists them)", topic))
			}
			client, err := topicsClient(cmd.Context(), *brokers, *connect)
			if err != nil {
				return withCode(2, err)
			}
			return raiseTopic(cmd.Context(), cmd.OutOrStdout(), client, obs.NewLogger("topics"), topic, n)
		},
	}
	cmd.Flags().IntVar(&partitions, "partitions", 0, "the new partition count (or give it after TOPIC)")
	return cmd
}

// topicsClient waits for a reachable broker and returns an admin client.
func topicsClient(ctx context.Context, brokers string, connect time.Duration) (*kafka.Client, error) {
	bl := kafkax.ParseBrokers(brokers)
	if err := kafkax.WaitReachable(ctx, bl, connect); err != nil {
		return nil, err
	}
	return kafkax.NewClient(bl), nil
}

// listTopics prints the table of the declared topics as the cluster has them.
func listTopics(ctx context.Context, out io.Writer, client *kafka.Client, log zerolog.Logger) error {
	states, nb, err := kafkax.DescribeTopics(ctx, client, kafkatopics.All())
	if err != nil {
		return withCode(1, err)
	}
	fmt.Fprintf(out, "brokers: %d\n", nb)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tCLASS\tPARTITIONS\tDECLARED\tREPLICATION\tDECLARED\tSTATE")
	var under, single, missing []string
	for _, s := range states {
		d := s.Declared
		state := "ok"
		parts, rf := "-", "-"
		switch {
		case !s.Exists:
			state = "missing"
			missing = append(missing, d.Name)
		case s.UnderReplicated() && nb == 1:
			// One broker (up's or broker's embedded one, or a one-broker
			// Kafka) cannot hold more than one replica: by design, not a
			// fault to fix on the topic.
			state = "one broker"
			single = append(single, d.Name)
		case s.UnderReplicated():
			state = "under-replicated"
			under = append(under, d.Name)
		}
		if s.Exists {
			parts, rf = strconv.Itoa(s.Partitions), strconv.Itoa(s.ReplicationFactor)
			if s.Partitions > d.Partitions {
				state += ", raised"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", d.Name, d.Class, parts, d.Partitions, rf, d.ReplicationFactor, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ev := log.Info()
	if len(under) > 0 || len(missing) > 0 {
		ev = log.Warn()
	}
	ev.Int("brokers", nb).Strs("under_replicated", under).Strs("missing", missing).Msg("topics listed")
	if len(single) > 0 {
		fmt.Fprintf(out, "\nThe cluster has one broker (harnessflow up's or harnessflow broker's embedded one, or a one-broker Kafka):\n"+
			"each topic has one replica, as durable as that broker's data directory. That is the single-machine\n"+
			"deployment's design; for replicas, run a Kafka cluster of 3 brokers (docker-compose.yml).\n")
	}
	if len(under) > 0 {
		fmt.Fprintf(out, "\n%d topic(s) have fewer replicas than declared: they lose data when a broker holding their only replicas fails.\n"+
			"Existing topics are never changed; raise their replication with Kafka's kafka-reassign-partitions.\n", len(under))
	}
	return nil
}

// raiseTopic raises topic (with a raw cell topic: all five) to n partitions.
func raiseTopic(ctx context.Context, out io.Writer, client *kafka.Client, log zerolog.Logger, topic string, n int) error {
	topics := []string{topic}
	if slices.Contains(processors.CellTopics, topic) {
		topics = processors.CellTopics
	}
	states, _, err := kafkax.DescribeTopics(ctx, client, defs(topics))
	if err != nil {
		return withCode(1, err)
	}
	// Refuse before changing anything: a lower count or a missing topic.
	for _, s := range states {
		if !s.Exists || n < s.Partitions {
			cur := s.Partitions
			if !s.Exists {
				cur = -1
			}
			return withCode(2, &kafkax.PartitionsError{Topic: s.Declared.Name, Current: cur, Asked: n})
		}
	}
	var raised []string
	for _, s := range states {
		if s.Partitions == n {
			continue
		}
		before, err := kafkax.RaisePartitions(ctx, client, s.Declared.Name, n)
		if err != nil {
			log.Error().Err(err).Strs("raised", raised).Msg("raise failed")
			return withCode(1, fmt.Errorf("%w (raised so far: %v; run the same command again: a topic already at %d is left as it is)", err, raised, n))
		}
		raised = append(raised, s.Declared.Name)
		log.Warn().Str("topic", s.Declared.Name).Int("from", before).Int("to", n).
			Msg("partitions raised: keys now map to other partitions; cells open during the raise are split")
		fmt.Fprintf(out, "%s: %d -> %d partitions\n", s.Declared.Name, before, n)
	}
	if len(raised) == 0 {
		fmt.Fprintf(out, "%v already at %d partitions: nothing changed\n", topics, n)
		log.Info().Strs("topics", topics).Int("partitions", n).Msg("nothing to raise")
		return nil
	}
	fmt.Fprintf(out, "\nWARNING: keys now hash to other partitions than before the raise. A cell (raw topics) or\n"+
		"campaign (hf.outcomes) still open is split: its later events are dead-lettered as unknown_cell\n"+
		"and the samples that need them are not produced. Raise only between campaigns, when no cell is open, and restart the\n"+
		"processors (`harnessflow topics raise --help` explains).\n")
	return nil
}

// defs returns the declarations of the named topics.
func defs(names []string) []kafkatopics.Topic {
	out := make([]kafkatopics.Topic, 0, len(names))
	for _, n := range names {
		d, ok := kafkatopics.Lookup(n)
		if !ok {
			d = kafkatopics.Topic{Name: n}
		}
		out = append(out, d)
	}
	return out
}
