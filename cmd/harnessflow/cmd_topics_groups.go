package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
)

// defaultGroups are the consumer groups harnessflow's components use with
// their default --group: the processors' two stages and campaign
// dead-letter mark, the sink, the trainer.
var defaultGroups = []string{"hf-processors", "hf-processors-pair", "hf-processors-campaigns", "hf-sink", "hf-trainer"}

func newTopicsGroupsCmd(brokers *string, connect *time.Duration) *cobra.Command {
	var groups []string
	var perPartition bool
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "Show each consumer group's committed offsets and lag on the harnessflow topics",
		Long: `groups shows, for each consumer group, the harnessflow topics it has committed
offsets on: the partitions committed, the sum of its committed offsets, the sum
of the topics' end offsets, and its lag (messages between the committed offset,
or the log start when retention deleted what lies below it, and the end).

The groups are those the brokers list (ListGroups) and harnessflow's default
ones (` + fmt.Sprint(defaultGroups) + `), or only those named with --group. A
group with no committed offset on a harnessflow topic is not shown. This is
what Burrow or kafka-consumer-groups show, for brokers without
__consumer_offsets (the embedded one).`,
		Example: "  harnessflow topics groups --brokers 127.0.0.1:9092\n  harnessflow topics groups --group hf-sink --partitions",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := topicsClient(cmd.Context(), *brokers, *connect)
			if err != nil {
				return withCode(2, err)
			}
			names := groups
			if len(names) == 0 {
				if names, err = knownGroups(cmd.Context(), client); err != nil {
					return withCode(1, err)
				}
			}
			return listGroups(cmd.Context(), cmd.OutOrStdout(), client, names, perPartition)
		},
	}
	cmd.Flags().StringSliceVar(&groups, "group", nil, "show only these groups (repeat or comma-separate)")
	cmd.Flags().BoolVar(&perPartition, "partitions", false, "one row per partition instead of per topic")
	return cmd
}

// knownGroups is the brokers' groups and harnessflow's default ones, sorted.
func knownGroups(ctx context.Context, client *kafka.Client) ([]string, error) {
	set := map[string]bool{}
	for _, g := range defaultGroups {
		set[g] = true
	}
	res, err := client.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	for _, g := range res.Groups {
		set[g.GroupID] = true
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	return out, nil
}

// listGroups prints each group's committed offsets and lag per topic (or
// per partition).
func listGroups(ctx context.Context, out io.Writer, client *kafka.Client, groups []string, perPartition bool) error {
	var topics []string
	for _, d := range kafkatopics.All() {
		topics = append(topics, d.Name)
	}
	ends, err := kafkax.EndOffsets(ctx, client, topics...)
	if err != nil {
		return withCode(1, err)
	}
	starts, err := kafkax.StartOffsets(ctx, client, ends)
	if err != nil {
		return withCode(1, err)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if perPartition {
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG")
	} else {
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITIONS\tCOMMITTED\tEND\tLAG")
	}
	shown := 0
	for _, g := range groups {
		committed, err := kafkax.Committed(ctx, client, g, ends)
		if err != nil {
			return withCode(1, err)
		}
		for _, t := range topics {
			parts := committed[t]
			ids := make([]int, 0, len(parts))
			for id, off := range parts {
				if off >= 0 {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				continue
			}
			sort.Ints(ids)
			var sumC, sumE, lag int64
			for _, id := range ids {
				c, e := parts[id], ends[t][id]
				if s := starts[t][id]; c < s {
					c = s // below the log start: deleted by retention, not lag
				}
				l := max(e-c, 0)
				if perPartition {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", g, t, id, parts[id], e, l)
				}
				sumC, sumE, lag = sumC+parts[id], sumE+e, lag+l
			}
			if !perPartition {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", g, t, strconv.Itoa(len(ids))+"/"+strconv.Itoa(len(ends[t])), sumC, sumE, lag)
			}
			shown++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shown == 0 {
		fmt.Fprintf(out, "\nno group has committed offsets on a harnessflow topic (groups asked: %v)\n", groups)
	}
	return nil
}
