package processors

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestFetchRecyclesPages checks that the fetcher hands the pages of what it
// fetched back to kafka-go's page pool: every record batch is read into at
// least one 64 KiB page, and a fetcher that leaves its records open takes
// fresh pages for each batch of every fetch (here about 13 MiB per pass over
// 200 one-record batches) where one that closes them reuses its pages.
func TestFetchRecyclesPages(t *testing.T) {
	addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const batches = 200
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: []string{addr}, Topic: schemas.TopicCells, BatchSize: 1})
	defer w.Close()
	for i := 0; i < batches; i++ { // one produce request, so one batch, per record
		msg := kafka.Message{Key: []byte("k"), Value: []byte(fmt.Sprintf("record %d", i)), Partition: 0}
		if err := w.WriteMessages(ctx, msg); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	var part int
	client := kafkax.NewClient([]string{addr})
	cfg := testConfig(addr, "pages")
	cfg.setDefaults()
	cfg.FetchMaxBytes = 4 << 20
	// Find the partition the writer's balancer chose.
	for p := 0; p < 64; p++ {
		f := &fetcher{client: client, cfg: &cfg, topic: schemas.TopicCells, part: p}
		off := int64(-1)
		res, err := f.fetch(ctx, &off)
		if err != nil {
			break
		}
		if res.hwm == batches {
			part = p
			break
		}
	}
	fetchAll := func() (n int, alloc uint64) {
		f := &fetcher{client: client, cfg: &cfg, topic: schemas.TopicCells, part: part}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for off := int64(0); off < batches; {
			res, err := f.fetch(ctx, &off)
			if err != nil {
				t.Fatalf("fetch at %d: %v", off, err)
			}
			if len(res.msgs) == 0 {
				t.Fatalf("empty fetch at %d below the high watermark %d", off, res.hwm)
			}
			n += len(res.msgs)
		}
		runtime.ReadMemStats(&after)
		return n, after.TotalAlloc - before.TotalAlloc
	}
	fetchAll() // fills the pool
	best := uint64(1 << 62)
	for i := 0; i < 5; i++ { // the least of several passes: a GC empties the pool
		n, alloc := fetchAll()
		if n != batches {
			t.Fatalf("fetched %d records, want %d", n, batches)
		}
		best = min(best, alloc)
	}
	t.Logf("allocated %d KiB per pass over %d one-record batches", best>>10, batches)
	// Recycled, a batch costs about 1 KiB (16 KiB under -race, where
	// sync.Pool drops a quarter of what it is given); not recycled, at least
	// a page (64 KiB).
	if per := best / batches; per >= 32<<10 {
		t.Fatalf("%d bytes allocated per record batch fetched: the fetched pages are not recycled", per)
	}
}
