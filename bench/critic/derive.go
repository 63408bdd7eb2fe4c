package critic

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
)

// derive simulates one campaign per seed of sims into a fresh in-memory
// broker, runs an in-process processor until it has caught up (as
// bench/chaos's reference run does) and returns the labeled samples it
// derived, deduplicated by sample id and sorted by (campaign, seed, cell,
// cycle) so that the order does not depend on partitions. There is no
// exported in-process path through the processors' stages (processors'
// local_test.go has one, test-only), so the broker is the cheapest one.
func derive(ctx context.Context, sims []sim.Config, progress io.Writer) ([]*schemas.LabeledSample, error) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	brokers := []string{b.Addr()}
	if err := kafkax.EnsureAllTopics(ctx, brokers, b.TopicOption()); err != nil {
		return nil, err
	}
	// A bench harness on a loaded machine: the embedded broker may answer
	// slowly for longer than a producer's usual 30 s of retries; the run's
	// context bounds the retries instead.
	p, err := producers.New(producers.Config{Brokers: brokers, BatchSize: 5000, BatchTimeout: 5 * time.Millisecond, MaxElapsedTime: time.Hour})
	if err != nil {
		return nil, err
	}
	events := 0
	for _, sc := range sims {
		st, err := sim.Run(ctx, sc, p, nil)
		if err != nil {
			p.Close(ctx)
			return nil, fmt.Errorf("simulate seed %d: %w", sc.Seed, err)
		}
		events += st.Events
	}
	if err := p.Close(ctx); err != nil {
		return nil, fmt.Errorf("close producer: %w", err)
	}
	fmt.Fprintf(progress, "  simulated %d campaigns, %d events; deriving samples\n", len(sims), events)
	// The whole log is written before the processor starts: each topic is
	// read at its own pace, so far more cells are open at once, and far
	// more events wait for their cell_started or their attempts, than in a
	// live stream. The per-project bounds that protect a shared processor
	// (1 000 open cells, 10 000 pending events per partition, 2 min) would
	// dead-letter events of a 100-campaign backlog, and the bench would
	// train on a set that depends on the machine's speed; here one trusted
	// project has the whole machine.
	proc, err := processors.New(processors.Config{Brokers: brokers, Group: "critic-offline", StopWhenCaughtUp: true,
		PendingMax: 1 << 24, PendingTimeout: time.Hour, MaxOpenCells: 1 << 24, MaxStateBytes: 1 << 40},
		processors.WithLogger(zerolog.Nop()))
	if err != nil {
		return nil, err
	}
	if err := proc.Run(ctx); err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	byID := map[string]*schemas.LabeledSample{}
	dead := 0
	why := map[string]int{}
	err = kafkax.ReadToEnd(ctx, brokers, func(m kafka.Message) error {
		if m.Topic == schemas.TopicDLQ {
			dead++
			if ev, err := schemas.Decode(m.Value); err == nil {
				if r, ok := ev.(*schemas.Rejected); ok {
					why[r.Stage+"/"+r.ReasonCode]++
				}
			}
			return nil
		}
		if s, err := schemas.Decode(m.Value); err == nil {
			if s, ok := s.(*schemas.LabeledSample); ok {
				byID[s.SampleID] = s
			}
		}
		return nil
	}, schemas.TopicSamples, schemas.TopicDLQ)
	if err != nil {
		return nil, err
	}
	if dead > 0 {
		// The simulator's events are all valid: a dead letter means the
		// derivation lost samples, and the figures would rest on a set that
		// depends on the machine's load.
		return nil, fmt.Errorf("%w: the processor dead-lettered %d of the simulated events (by stage/reason: %v)", ErrNoSamples, dead, why)
	}
	out := make([]*schemas.LabeledSample, 0, len(byID))
	for _, s := range byID {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.CampaignID != b.CampaignID {
			return a.CampaignID < b.CampaignID
		}
		if a.Seed != b.Seed {
			return a.Seed < b.Seed
		}
		if a.CellID != b.CellID {
			return a.CellID < b.CellID
		}
		if a.Cycle != b.Cycle {
			return a.Cycle < b.Cycle
		}
		return a.SampleID < b.SampleID
	})
	return out, nil
}
