package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/trainer"
)

func init() { register(newExportDatasetCmd) }

func newExportDatasetCmd() *cobra.Command {
	var cfg trainer.ExportConfig
	var brokers string
	cmd := &cobra.Command{
		Use:   "export-dataset",
		Short: "Export hf.samples as deterministic TRL-shaped dataset shards with a manifest",
		Long: `export-dataset reads hf.samples from the first offsets to the end offsets at start
(no consumer group), drops repeated sample ids, and writes shard-NNNNN.jsonl files and
manifest.json (counts, source offsets, sha256 per shard) to --out:
  trl-preference  {prompt, chosen, rejected}: a positive and a negative update on the
                  same evidence context (campaign, benchmark, agent, query), never the
                  same update on both sides
  trl-kto         {prompt, completion, label}: label true for positive, false for
                  negative; neutral samples are left out
  jsonl           the labeled samples as they are`,
		Example: "  harnessflow export-dataset --brokers 127.0.0.1:9092 --format trl-preference --out ./dataset",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			m, err := trainer.Export(cmd.Context(), cfg, trainer.WithLogger(obs.NewLogger("export-dataset")))
			if err != nil {
				if errors.Is(err, trainer.ErrConfig) {
					return withCode(2, err)
				}
				return withCode(1, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d rows in %d shards (%d samples, %d duplicates) -> %s\n",
				m.Counts.Rows, len(m.Shards), m.Counts.Samples, m.Counts.Duplicates, cfg.Out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, comma-separated")
	f.StringVar(&cfg.Format, "format", trainer.FormatPreference, "trl-preference, trl-kto or jsonl")
	f.StringVar(&cfg.Out, "out", "", "output directory (required)")
	f.IntVar(&cfg.ShardRows, "shard-rows", trainer.DefaultExportConfig().ShardRows, "rows per shard")
	return cmd
}
