package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// sampleKey is what the chaos run's samples must share with the reference's.
type sampleKey struct {
	Label  string
	Effect float64
	PValue float64
}

// reference is the outcome of the uninterrupted run.
type reference struct {
	// Samples by sample id.
	Samples map[string]sampleKey
	// SampleUpdates names each sample's update (for reports).
	SampleUpdates map[string]string
	// Rounds are the round_metrics event ids.
	Rounds map[string]bool
	// DLQ maps each dead letter's payload to its reason code.
	DLQ map[string]string
	// Took is how long the reference processor ran.
	Took time.Duration
}

// runReference writes the campaign, malformed events included and in stream
// order, to a clean in-memory broker and runs an in-process processor until
// it has caught up; it returns the derived events, deduplicated by id.
func runReference(ctx context.Context, c *gen.Campaign, bad []malformed) (*reference, error) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	brokers := []string{b.Addr()}
	if err := kafkax.EnsureAllTopics(ctx, brokers, b.TopicOption()); err != nil {
		return nil, err
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, BatchSize: 5000, BatchBytes: 16 << 20})
	batch := make([]kafka.Message, 0, 5000)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := w.WriteMessages(ctx, batch...); err != nil {
			return fmt.Errorf("reference: write the campaign: %w", err)
		}
		batch = batch[:0]
		return nil
	}
	j := 0
	for i, r := range c.Records {
		v, err := schemas.Encode(r.Event)
		if err != nil {
			w.Close()
			return nil, err
		}
		batch = append(batch, kafka.Message{Topic: r.Topic, Key: []byte(r.Event.PartitionKey()), Value: v, Time: r.Time})
		for ; j < len(bad) && bad[j].After == i; j++ {
			m := bad[j].Msg
			m.Time = r.Time
			batch = append(batch, m)
		}
		if len(batch) >= 4900 {
			if err := flush(); err != nil {
				w.Close()
				return nil, err
			}
		}
	}
	err = flush()
	w.Close()
	if err != nil {
		return nil, err
	}
	p, err := processors.New(processors.Config{Brokers: brokers, Group: "chaos-reference", StopWhenCaughtUp: true},
		processors.WithLogger(zerolog.Nop()))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := p.Run(ctx); err != nil {
		return nil, fmt.Errorf("reference processor: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ref := &reference{Samples: map[string]sampleKey{}, SampleUpdates: map[string]string{}, Rounds: map[string]bool{}, DLQ: map[string]string{}, Took: time.Since(start)}
	err = readTopics(ctx, brokers, func(_ kafka.Message, ev schemas.Event) {
		switch e := ev.(type) {
		case *schemas.LabeledSample:
			ref.Samples[e.SampleID] = sampleKey{Label: e.Label, Effect: e.Effect, PValue: e.PValue}
			ref.SampleUpdates[e.SampleID] = e.UpdateID
		case *schemas.RoundMetrics:
			ref.Rounds[e.EventID] = true
		case *schemas.Rejected:
			ref.DLQ[string(e.Payload)] = e.ReasonCode
		}
	}, schemas.TopicSamples, schemas.TopicRoundMetrics, schemas.TopicDLQ)
	if err != nil {
		return nil, err
	}
	return ref, nil
}

// readTopics decodes every message of topics, from the first offset to the
// end offset read at the start, and hands each event with its message to fn.
func readTopics(ctx context.Context, brokers []string, fn func(kafka.Message, schemas.Event), topics ...string) error {
	err := kafkax.ReadToEnd(ctx, brokers, func(m kafka.Message) error {
		if ev, err := schemas.Decode(m.Value); err == nil {
			fn(m, ev)
		}
		return nil
	}, topics...)
	if err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	return nil
}
