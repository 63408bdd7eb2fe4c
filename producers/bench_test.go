package producers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// BenchmarkEmit measures Emit throughput of task_attempt events against the
// embedded broker, Flush included, for a few batch sizes.
func BenchmarkEmit(b *testing.B) {
	b.Run("task_attempt", func(b *testing.B) {
		benchEmit(b, func(i int) schemas.Event { return producerstest.TaskAttempt(i, "bench") })
	})
	b.Run("mixed", func(b *testing.B) {
		benchEmit(b, func(i int) schemas.Event {
			return producerstest.Event(producerstest.RawTypes[i%len(producerstest.RawTypes)], i, "bench")
		})
	})
}

func benchEmit(b *testing.B, gen func(int) schemas.Event) {
	br := testenv.Kafka(b)
	evs := make([]schemas.Event, 4096)
	var size int
	for i := range evs {
		evs[i] = gen(i)
		enc, err := schemas.Encode(evs[i])
		if err != nil {
			b.Fatal(err)
		}
		size += len(enc)
	}
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			p, err := producers.New(producers.Config{Brokers: []string{br.Addr()}, BatchSize: batch})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size / len(evs)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := p.Emit(ctx, evs[i%len(evs)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
			b.StopTimer()
			if err := p.Close(ctx); err != nil {
				b.Fatal(err)
			}
			if s := p.Stats(); s.Failed != 0 {
				b.Fatalf("%d events failed", s.Failed)
			}
		})
	}
}
