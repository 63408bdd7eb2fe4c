package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

func init() { register(newCriticEvalCmd) }

// criticEvalFlags are critic-eval's flags.
type criticEvalFlags struct {
	samples, checkpoint, key, device string
	heldout, trainerHeldout          float64
	splitSeed                        uint64
	cfg                              eval.Config
}

func newCriticEvalCmd() *cobra.Command {
	var fl criticEvalFlags
	cmd := &cobra.Command{
		Use:   "critic-eval",
		Short: "Score a critic checkpoint against trivial baselines on a group-split held-out set, with bootstrap CIs",
		Long: `critic-eval reads labeled samples (export-dataset --format jsonl: a shard file, or a
directory whose *.jsonl files are read in name order), drops those the trainer would not
train on (empty id, unknown label, effect not finite or outside [-1, 1]), and splits them
by group (--group-key: campaign, campaign+seed or cell; never by sample) with --group-heldout-fraction
and --split-seed. On the training side it fits the baselines: the median effect, the
majority label, the per-(evolver, agent, benchmark) mean effect (the median for an unseen
one), and the least-squares regression of effect on the evidence score parsed from the
query (the mean of its "task <id>: pass|fail score=<x>" figures; the median without one),
and the two together (a level per cell plus one evidence slope: the context regression,
what a model can learn without reading the update). The checkpoint's models (the ensemble's mean and mixture std, as /v1/score) and the
baselines are scored on the same held-out rows: effect RMSE, Spearman rho, coverage of
1 and 2 sigma, Gaussian NLL (the median baseline's is the constant-Gaussian NLL) and label
macro-F1, each with a percentile interval from --resamples bootstrap resamples of the
held-out groups. Then model minus the best baseline per metric, paired on the same
resamples: the verdict is "beats baselines" only when every difference's interval
excludes 0 in the model's favour and there are at least --min-groups held-out groups,
else "no signal yet".

The model must not have trained on the held-out groups. harnessflow train holds out whole
groups by the same hash with seed 0 (except the first group it saw, which it trains on),
so --split-seed 0 with --group-heldout-fraction and --group-key set to the train run's
--heldout-fraction and --heldout-group-key reproduces its split; with another split,
--trainer-heldout-fraction F (the train run's --heldout-fraction) keeps only held-out rows
of groups the trainer held out too.

Exit codes: 0 report printed (whatever the verdict), 1 failure, 2 bad flags or input.`,
		Example: `  harnessflow export-dataset --format jsonl --out ./ds
  harnessflow critic-eval --samples ./ds --checkpoint ./checkpoints --group-key campaign+seed`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCriticEval(cmd.OutOrStdout(), fl)
		},
	}
	// Flag names differ from train's --heldout-fraction and --seed so that
	// their environment variables (HF_HELDOUT_FRACTION, HF_SEED) set for a
	// train run do not silently change this command.
	f := cmd.Flags()
	f.StringVar(&fl.samples, "samples", "", "labeled samples: a JSONL file or a directory of *.jsonl (required)")
	f.StringVar(&fl.checkpoint, "checkpoint", "", "a checkpoint file, or a checkpoint directory (its newest valid one) (required)")
	f.StringVar(&fl.key, "group-key", string(eval.DefaultGroupKey), "group key of the split and the bootstrap: campaign, campaign+seed or cell")
	f.Float64Var(&fl.heldout, "group-heldout-fraction", 0.2, "fraction of groups held out")
	f.Uint64Var(&fl.splitSeed, "split-seed", 0, "seed of the group split")
	f.Float64Var(&fl.trainerHeldout, "trainer-heldout-fraction", 0, "keep only held-out rows of groups that train --heldout-fraction F held out, with --group-key as its --heldout-group-key (0: all)")
	f.IntVar(&fl.cfg.Resamples, "resamples", 1000, "bootstrap resamples of the held-out groups")
	f.Float64Var(&fl.cfg.Level, "level", 0.95, "interval coverage")
	f.Uint64Var(&fl.cfg.Seed, "bootstrap-seed", 0, "bootstrap seed")
	f.IntVar(&fl.cfg.MinGroups, "min-groups", 10, "fewest held-out groups a verdict may rest on")
	f.StringVar(&fl.device, "device", "cpu", "backend to score on: cpu, cuda or auto")
	return cmd
}

func runCriticEval(out io.Writer, fl criticEvalFlags) error {
	if fl.samples == "" || fl.checkpoint == "" {
		return withCode(2, errors.New("--samples and --checkpoint are required"))
	}
	key, err := eval.ParseGroupKey(fl.key)
	if err != nil {
		return withCode(2, err)
	}
	fl.cfg.Key = key
	if err := fl.cfg.Validate(); err != nil {
		return withCode(2, err)
	}
	all, err := readSamples(fl.samples)
	if err != nil {
		return withCode(2, err)
	}
	clean, dropped := eval.Clean(all)
	train, held, err := eval.Split(clean, key, fl.heldout, fl.splitSeed)
	if err != nil {
		return withCode(2, err)
	}
	if fl.trainerHeldout > 0 {
		var keep []*schemas.LabeledSample
		for _, s := range held {
			if trainer.IsHeldOutGroup(trainer.GroupOf(string(key), s), fl.trainerHeldout) {
				keep = append(keep, s)
			}
		}
		held = keep
	}
	if len(train) == 0 || len(held) == 0 {
		return withCode(2, fmt.Errorf("%d samples (%d dropped) split into %d training and %d held-out rows: need both", len(clean), dropped, len(train), len(held)))
	}
	models, version, err := loadCritic(fl.checkpoint, fl.device)
	if err != nil {
		return withCode(1, err)
	}
	bs, err := eval.Baselines(train, held)
	if err != nil {
		return withCode(1, err)
	}
	model := eval.Predictions{Name: "model " + version, Preds: eval.ModelPredictions(models, held, 256), Effect: true, Label: true}
	rep, err := eval.Evaluate(fl.cfg, held, model, bs)
	if err != nil {
		return withCode(1, err)
	}
	fmt.Fprintf(out, "samples: %d read, %d dropped as untrainable, %d training rows (baselines), %d held-out rows\n",
		len(all), dropped, len(train), len(held))
	return rep.WriteTable(out)
}

// readSamples decodes labeled samples, one JSON object per line, from a file
// or from every *.jsonl file of a directory in name order.
func readSamples(path string) ([]*schemas.LabeledSample, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if st.IsDir() {
		files, err = filepath.Glob(filepath.Join(path, "*.jsonl"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no *.jsonl file", path)
		}
	}
	var out []*schemas.LabeledSample
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bufio.NewReader(f))
		for n := 1; ; n++ {
			var s schemas.LabeledSample
			if err := dec.Decode(&s); err == io.EOF {
				break
			} else if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: record %d: %w", name, n, err)
			}
			out = append(out, &s)
		}
		f.Close()
	}
	return out, nil
}

// loadCritic reads a checkpoint (a file, or a directory's newest valid one)
// and rebuilds its models on device.
func loadCritic(path, device string) ([]*trainer.Model, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", err
	}
	var ck *trainer.Checkpoint
	if st.IsDir() {
		store, err := trainer.NewCheckpointStore(path, 1<<30)
		if err != nil {
			return nil, "", err
		}
		ck, _, err = store.LoadLatest()
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
	} else if ck, err = trainer.ReadCheckpoint(path); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if len(ck.Models) == 0 {
		return nil, "", fmt.Errorf("%s: checkpoint holds no model", path)
	}
	be, _, err := backend.Open(device)
	if err != nil {
		return nil, "", err
	}
	var models []*trainer.Model
	for i, ms := range ck.Models {
		m, err := trainer.NewModel(be, ms.Config)
		if err != nil {
			return nil, "", fmt.Errorf("%s: model %d: %w", path, i, err)
		}
		if err := m.Restore(ms); err != nil {
			return nil, "", fmt.Errorf("%s: model %d: %w", path, i, err)
		}
		models = append(models, m)
	}
	version := ck.ModelVersion
	if version == "" {
		version = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return models, version, nil
}
