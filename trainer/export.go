package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// Export formats.
const (
	// FormatPreference writes TRL preference rows {prompt, chosen, rejected}.
	FormatPreference = "trl-preference"
	// FormatKTO writes TRL unpaired rows {prompt, completion, label}.
	FormatKTO = "trl-kto"
	// FormatJSONL writes the raw labeled samples.
	FormatJSONL = "jsonl"
)

// ExportConfig configures Export.
type ExportConfig struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Topic is read from its first to its end offsets at start. Default: hf.samples.
	Topic string
	// Format is trl-preference, trl-kto or jsonl. Required.
	Format string
	// Out is the output directory (created; existing shards are overwritten). Required.
	Out string
	// ShardRows is the maximum rows per shard. Default: 10000.
	ShardRows int
}

// DefaultExportConfig is the export configuration filled in for the fields
// left zero (Format and Out are required; `export-dataset` offers
// FormatPreference).
func DefaultExportConfig() ExportConfig {
	var c ExportConfig
	c.setDefaults()
	return c
}

func (c *ExportConfig) setDefaults() {
	if c.Topic == "" {
		c.Topic = schemas.TopicSamples
	}
	if c.ShardRows == 0 {
		c.ShardRows = 10000
	}
}

// Validate reports every problem with c.
func (c *ExportConfig) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, fmt.Errorf("%w: no Kafka brokers (--brokers)", ErrConfig))
	}
	if c.Out == "" {
		errs = append(errs, fmt.Errorf("%w: no output directory (--out)", ErrConfig))
	}
	switch c.Format {
	case FormatPreference, FormatKTO, FormatJSONL:
	default:
		errs = append(errs, fmt.Errorf("%w: format %q: want trl-preference, trl-kto or jsonl", ErrConfig, c.Format))
	}
	if c.ShardRows < 1 {
		errs = append(errs, fmt.Errorf("%w: shard rows must be ≥ 1", ErrConfig))
	}
	return errors.Join(errs...)
}

// Manifest describes an export: it is written as manifest.json and contains no
// timestamps, so the same topic contents give byte-identical exports.
type Manifest struct {
	Format string        `json:"format"`
	Counts ExportCounts  `json:"counts"`
	Source ExportSource  `json:"source"`
	Shards []ExportShard `json:"shards"`
}

// ExportCounts are an export's counts.
type ExportCounts struct {
	// Messages read; Undecodable of them skipped; Duplicates are repeated
	// sample ids (the copy at the lowest partition/offset is kept).
	Messages    int `json:"messages"`
	Undecodable int `json:"undecodable"`
	Duplicates  int `json:"duplicates"`
	// Samples are the unique samples; Positive, Negative, Neutral by label.
	Samples  int `json:"samples"`
	Positive int `json:"positive"`
	Negative int `json:"negative"`
	Neutral  int `json:"neutral"`
	// Rows written; Unpaired are positive or negative samples left without a
	// partner (trl-preference); Excluded are samples the format leaves out
	// (neutral ones for trl-kto and trl-preference).
	Rows     int `json:"rows"`
	Unpaired int `json:"unpaired"`
	Excluded int `json:"excluded"`
}

// ExportSource is what was read.
type ExportSource struct {
	Topic      string           `json:"topic"`
	Partitions []PartitionRange `json:"partitions"`
}

// PartitionRange is the offsets [Start, End) read from one partition.
type PartitionRange struct {
	Partition int   `json:"partition"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
}

// ExportShard is one written file.
type ExportShard struct {
	File   string `json:"file"`
	Rows   int    `json:"rows"`
	SHA256 string `json:"sha256"`
}

// PreferenceRow is a TRL preference pair.
type PreferenceRow struct {
	Prompt   string `json:"prompt"`
	Chosen   string `json:"chosen"`
	Rejected string `json:"rejected"`
}

// KTORow is a TRL unpaired (KTO) row: label true for a positive update, false
// for a negative one.
type KTORow struct {
	Prompt     string `json:"prompt"`
	Completion string `json:"completion"`
	Label      bool   `json:"label"`
}

type located struct {
	part int
	off  int64
	s    *schemas.LabeledSample
}

// Export reads cfg.Topic from offset 0 to the end offsets at start (no consumer
// group), deduplicates by sample_id, and writes deterministic shards
// (shard-00000.jsonl, ...) and manifest.json into cfg.Out. Of the options it
// reads only WithLogger (default: obs.NewLogger("export-dataset")).
func Export(ctx context.Context, cfg ExportConfig, opts ...Option) (*Manifest, error) {
	o := collect(opts)
	log := o.logger("export-dataset")
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := kafkax.WaitReachable(ctx, cfg.Brokers, 30*time.Second); err != nil {
		return nil, err
	}
	conn, err := kafkax.DialContext(ctx, "tcp", cfg.Brokers[0])
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", cfg.Brokers[0], err)
	}
	parts, err := conn.ReadPartitions(cfg.Topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", cfg.Topic, err)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].ID < parts[j].ID })
	m := &Manifest{Format: cfg.Format, Source: ExportSource{Topic: cfg.Topic}}
	var all []located
	for _, p := range parts {
		lc, err := kafkax.DialLeader(ctx, "tcp", cfg.Brokers[0], cfg.Topic, p.ID)
		if err != nil {
			return nil, fmt.Errorf("dial leader of %s/%d: %w", cfg.Topic, p.ID, err)
		}
		first, last, err := lc.ReadOffsets()
		lc.Close()
		if err != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", cfg.Topic, p.ID, err)
		}
		m.Source.Partitions = append(m.Source.Partitions, PartitionRange{Partition: p.ID, Start: first, End: last})
		if last <= first {
			continue
		}
		got, bad, err := readRange(ctx, cfg, p.ID, first, last)
		if err != nil {
			return nil, err
		}
		m.Counts.Messages += int(last - first)
		m.Counts.Undecodable += bad
		all = append(all, got...)
	}
	samples, dups := dedupeSamples(all)
	m.Counts.Duplicates = dups
	rows, err := buildRows(cfg.Format, samples, &m.Counts)
	if err != nil {
		return nil, err
	}
	if err := writeShards(cfg, rows, m); err != nil {
		return nil, err
	}
	log.Info().Str("format", cfg.Format).Str("out", cfg.Out).Int("rows", m.Counts.Rows).Int("samples", m.Counts.Samples).
		Int("duplicates", dups).Int("shards", len(m.Shards)).Msg("dataset exported")
	return m, nil
}

func readRange(ctx context.Context, cfg ExportConfig, part int, first, last int64) ([]located, int, error) {
	rc := kafkax.ReaderConfig(cfg.Brokers, "", cfg.Topic)
	rc.Partition = part
	r := kafka.NewReader(rc)
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return nil, 0, fmt.Errorf("seek %s/%d: %w", cfg.Topic, part, err)
	}
	var out []located
	bad := 0
	for {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s/%d: %w", cfg.Topic, part, err)
		}
		ev, err := schemas.Decode(msg.Value)
		if s, ok := ev.(*schemas.LabeledSample); err == nil && ok {
			out = append(out, located{part: part, off: msg.Offset, s: s})
		} else {
			bad++
		}
		if msg.Offset >= last-1 {
			return out, bad, nil
		}
	}
}

// dedupeSamples keeps, for each sample_id, the copy at the lowest
// (partition, offset), and returns the samples sorted by sample_id.
func dedupeSamples(all []located) ([]*schemas.LabeledSample, int) {
	sort.Slice(all, func(i, j int) bool {
		if all[i].s.SampleID != all[j].s.SampleID {
			return all[i].s.SampleID < all[j].s.SampleID
		}
		if all[i].part != all[j].part {
			return all[i].part < all[j].part
		}
		return all[i].off < all[j].off
	})
	var out []*schemas.LabeledSample
	dups := 0
	for i, l := range all {
		if i > 0 && all[i-1].s.SampleID == l.s.SampleID {
			dups++
			continue
		}
		out = append(out, l.s)
	}
	return out, dups
}

// contextKey groups samples that share an evidence context for pairing.
type contextKey struct{ campaign, benchmark, agent, query string }

// buildRows turns deduplicated, sample_id-sorted samples into the format's
// JSON rows, deterministically.
func buildRows(format string, samples []*schemas.LabeledSample, c *ExportCounts) ([][]byte, error) {
	c.Samples = len(samples)
	for _, s := range samples {
		switch s.Label {
		case "positive":
			c.Positive++
		case "negative":
			c.Negative++
		default:
			c.Neutral++
		}
	}
	var rows []any
	switch format {
	case FormatJSONL:
		for _, s := range samples {
			cp := *s // times in UTC, whatever zone the decoder chose
			cp.EventTime, cp.ProducedAt = cp.EventTime.UTC(), cp.ProducedAt.UTC()
			rows = append(rows, &cp)
		}
	case FormatKTO:
		for _, s := range samples {
			switch s.Label {
			case "positive", "negative":
				rows = append(rows, KTORow{Prompt: s.Query, Completion: s.Update, Label: s.Label == "positive"})
			default:
				c.Excluded++
			}
		}
	case FormatPreference:
		groups := map[contextKey]*[2][]*schemas.LabeledSample{}
		var keys []contextKey
		for _, s := range samples {
			k := contextKey{s.CampaignID, s.Benchmark, s.AgentModel, s.Query}
			side := -1
			switch s.Label {
			case "positive":
				side = 0
			case "negative":
				side = 1
			default:
				c.Excluded++
				continue
			}
			g := groups[k]
			if g == nil {
				g = &[2][]*schemas.LabeledSample{}
				groups[k] = g
				keys = append(keys, k)
			}
			g[side] = append(g[side], s)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if a.campaign != b.campaign {
				return a.campaign < b.campaign
			}
			if a.benchmark != b.benchmark {
				return a.benchmark < b.benchmark
			}
			if a.agent != b.agent {
				return a.agent < b.agent
			}
			return a.query < b.query
		})
		for _, k := range keys {
			pairs, unpaired := pairContext(groups[k][0], groups[k][1])
			c.Unpaired += unpaired
			for _, p := range pairs {
				rows = append(rows, PreferenceRow{Prompt: k.query, Chosen: p[0].Update, Rejected: p[1].Update})
			}
		}
	default:
		return nil, fmt.Errorf("%w: format %q", ErrConfig, format)
	}
	out := make([][]byte, len(rows))
	for i, r := range rows {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode row %d: %w", i, err)
		}
		out[i] = b
	}
	c.Rows = len(out)
	return out, nil
}

// pairContext pairs positives with negatives of one context greedily in
// sample_id order: each positive takes the first unused negative with a
// different update_id and different text; each sample is used at most once.
func pairContext(pos, neg []*schemas.LabeledSample) (pairs [][2]*schemas.LabeledSample, unpaired int) {
	used := make([]bool, len(neg))
	for _, p := range pos {
		found := false
		for j, n := range neg {
			if used[j] || n.UpdateID == p.UpdateID || n.Update == p.Update {
				continue
			}
			used[j], found = true, true
			pairs = append(pairs, [2]*schemas.LabeledSample{p, n})
			break
		}
		if !found {
			unpaired++
		}
	}
	for _, u := range used {
		if !u {
			unpaired++
		}
	}
	return pairs, unpaired
}

func writeShards(cfg ExportConfig, rows [][]byte, m *Manifest) error {
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return fmt.Errorf("output dir: %w", err)
	}
	for i := 0; i == 0 || i*cfg.ShardRows < len(rows); i++ {
		chunk := rows[i*cfg.ShardRows : min((i+1)*cfg.ShardRows, len(rows))]
		var data []byte
		for _, r := range chunk {
			data = append(data, r...)
			data = append(data, '\n')
		}
		name := fmt.Sprintf("shard-%05d.jsonl", i)
		if err := writeFileAtomic(filepath.Join(cfg.Out, name), data); err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		m.Shards = append(m.Shards, ExportShard{File: name, Rows: len(chunk), SHA256: hex.EncodeToString(sum[:])})
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(cfg.Out, "manifest.json"), append(b, '\n'))
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}
