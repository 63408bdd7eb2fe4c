package processors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// fetched is one fetch response of a stream, decoded.
type fetched struct {
	stream int
	msgs   []*inMsg
	hwm    int64 // the partition's high watermark at fetch time
	next   int64 // the offset after the last message fetched
	// asked is when the fetch was sent (wall clock): an answer at the
	// high watermark shows the partition held nothing more at that time.
	asked time.Time
	err   error
}

// fetcher reads one topic partition from an offset on, one fetch per token on
// want, and decodes what it read (so decoding runs beside the merge loop).
type fetcher struct {
	client *kafka.Client
	cfg    *Config
	topic  string
	part   int
	idx    int
	decode bool
	// dec decodes Confluent-framed values through the schema registry
	// (Config.SchemaRegistry); nil: none (they are dead-lettered).
	dec   *schemas.Decoder
	cache *evCache // events this process admitted (stage B); nil: none
	// split: the topic is hf.outcomes, whose batched records are read as
	// their events (outbatch.go).
	split bool
	// m counts fetches and records (nil: not counted); its topic's
	// counters are resolved at the first fetch.
	m                  *metrics
	fetches, fetchRecs prometheus.Counter
	// started: a fetch answered. The first fetch does not wait at the broker
	// (an empty partition answers at once, with its high watermark), so that
	// a stage knows without FetchWait's delay which streams are at their end.
	started bool
}

// firstOffset returns the log start offset of the partition.
func firstOffset(ctx context.Context, client *kafka.Client, topic string, part int) (int64, error) {
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.FirstOffsetOf(part)}}})
	if err != nil {
		return 0, err
	}
	for _, p := range res.Topics[topic] {
		if p.Partition == part {
			if p.Error != nil {
				return 0, p.Error
			}
			return p.FirstOffset, nil
		}
	}
	return 0, fmt.Errorf("list offsets %s/%d: partition missing from answer", topic, part)
}

// run fetches from offset on until ctx ends. Errors other than ctx's are
// retried with backoff; one that outlasts Config.RetryMaxElapsed is sent.
func (f *fetcher) run(ctx context.Context, offset int64, want <-chan struct{}, out chan<- fetched) {
	policy := retry.Policy{Initial: 50 * time.Millisecond, Max: time.Second, MaxElapsed: f.cfg.RetryMaxElapsed}
	for {
		select {
		case <-ctx.Done():
			return
		case <-want:
		}
		var res fetched
		err := retry.Do(ctx, policy, func() error {
			var err error
			res, err = f.fetch(ctx, &offset)
			if ctx.Err() != nil {
				return retry.Permanent(ctx.Err())
			}
			return err
		}, nil)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			res = fetched{stream: f.idx, err: fmt.Errorf("fetch %s/%d at %d: %w", f.topic, f.part, offset, err)}
		}
		select {
		case out <- res:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (f *fetcher) fetch(ctx context.Context, offset *int64) (fetched, error) {
	if *offset < 0 {
		first, err := firstOffset(ctx, f.client, f.topic, f.part)
		if err != nil {
			return fetched{}, err
		}
		*offset = first
	}
	wait := f.cfg.FetchWait
	if !f.started {
		wait = time.Millisecond
	}
	asked := time.Now()
	res, err := f.client.Fetch(ctx, &kafka.FetchRequest{
		Topic: f.topic, Partition: f.part, Offset: *offset,
		MinBytes: 1, MaxBytes: int64(f.cfg.FetchMaxBytes), MaxWait: wait,
	})
	if err != nil {
		return fetched{}, err
	}
	f.started = true
	if res.Error != nil {
		if errors.Is(res.Error, kafka.OffsetOutOfRange) {
			// Retention removed what we wanted: restart at the log start.
			*offset = -1
		}
		return fetched{}, res.Error
	}
	out := fetched{stream: f.idx, hwm: res.HighWatermark, next: *offset, asked: asked}
	arrived := time.Now()
	// One allocation for the fetch's messages instead of one per message.
	var slab []inMsg
	for {
		r, err := res.Records.ReadRecord()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if len(out.msgs) > 0 {
				break // keep what was read; the rest comes with the next fetch
			}
			return fetched{}, err
		}
		if r.Offset < *offset {
			release(r)
			continue
		}
		if len(slab) == cap(slab) {
			slab = make([]inMsg, 0, min(max(2*cap(slab), 64), 4096))
		}
		slab = append(slab, inMsg{topic: f.topic, partition: f.part, offset: r.Offset, ts: r.Time, arrived: arrived})
		m := &slab[len(slab)-1]
		if m.key, err = protocol.ReadAll(r.Key); err == nil {
			m.value, err = protocol.ReadAll(r.Value)
		}
		release(r)
		if err != nil {
			return fetched{}, err
		}
		out.next = r.Offset + 1
		if f.split && isOutcomeBatch(m.value) {
			rec := *m
			slab = slab[:len(slab)-1]
			first := len(out.msgs)
			err := splitOutcomes(rec.value, func(ts time.Time, ev []byte) {
				if len(slab) == cap(slab) {
					slab = make([]inMsg, 0, min(max(2*cap(slab), 64), 4096))
				}
				sub := rec
				sub.ts, sub.value, sub.sub, sub.more = ts, ev, len(out.msgs)-first, true
				slab = append(slab, sub)
				out.msgs = append(out.msgs, &slab[len(slab)-1])
			})
			if err != nil {
				// Not a record stage A wrote: dead-letter it whole.
				clear(out.msgs[first:])
				out.msgs = out.msgs[:first]
				rec.rej = reject(schemas.StageDecode, schemas.CodeMalformed, "%v", err)
				out.msgs = append(out.msgs, &rec)
				continue
			}
			out.msgs[len(out.msgs)-1].more = false
			continue
		}
		out.msgs = append(out.msgs, m)
	}
	if f.decode {
		if err := decodeAll(ctx, out.msgs, f.cfg.Limits, f.cache, f.dec); err != nil {
			// The schema registry could not be asked: nothing of this
			// fetch is dead-lettered; run tries the fetch again, and a
			// registry down past the retry budget restarts the
			// partition's work from the committed offsets.
			if f.m != nil {
				f.m.registryErrors.Inc()
			}
			return fetched{}, fmt.Errorf("decode %s/%d: %w", f.topic, f.part, err)
		}
	}
	if f.m != nil {
		if f.fetches == nil {
			f.fetches, f.fetchRecs = f.m.fetches.WithLabelValues(f.topic), f.m.fetchedRecs.WithLabelValues(f.topic)
		}
		f.fetches.Inc()
		f.fetchRecs.Add(float64(out.next - *offset))
	}
	*offset = out.next
	return out, nil
}

// release closes a fetched record's key and value once they are copied out.
// They reference the fetch's 64 KiB pages, which go back to kafka-go's page
// pool only when every reference to them is closed; left open, every record
// batch read took fresh zeroed pages (a whole page even for a batch of a few
// records) and left them to the GC.
func release(r *kafka.Record) {
	if r.Key != nil {
		r.Key.Close()
	}
	if r.Value != nil {
		r.Value.Close()
	}
}

// stream is the merge loop's view of one fetcher.
type stream struct {
	topic     string
	rank      int
	buf       []*inMsg
	pos       int
	queued    []fetched
	inflight  bool
	hwm       int64
	next      int64 // offset after the last message received
	consumed  int64 // offset after the last message processed (next to commit)
	committed int64 // committed offset at assignment (< 0: none)
	flushedTo int64 // consumed offset handed to the last flush (commit)
	want      chan struct{}
	in        prometheus.Counter // events in, for this topic
	lastTS    time.Time          // timestamp of the last message processed
	// endSeen is when the latest fetch that found the stream at its high
	// watermark was sent: the stream held nothing newer than that then.
	endSeen time.Time
}

func (s *stream) head() *inMsg {
	if s.pos < len(s.buf) {
		return s.buf[s.pos]
	}
	return nil
}

// typeRank orders events of one timestamp: a cell's start before its updates,
// attempts, skill events and judgments, its finish last.
func typeRank(m *inMsg) int {
	if m.ev == nil {
		return 3
	}
	switch m.ev.Type() {
	case schemas.TypeCellStarted:
		return 0
	case schemas.TypeHarnessUpdate:
		return 1
	case schemas.TypeTaskAttempt:
		return 2
	case schemas.TypeSkillEvent:
		return 3
	case schemas.TypeAdherenceJudgment:
		return 4
	case schemas.TypeCellFinished:
		return 6
	}
	return 5
}

// mergeTime is the time a message is merged by: the event's own event_time
// when it decoded and has one, else the message timestamp. Producers batch
// each topic partition on its own, so message timestamps of different topics
// do not follow the order in which a cell's events happened (an update can be
// stamped after its cell's cell_finished); event times do.
func mergeTime(m *inMsg) time.Time {
	if m.ev != nil {
		if t := m.ev.Header().EventTime; !t.IsZero() {
			return t
		}
	}
	return m.ts
}

// before is the deterministic merge order: merge time, type rank, topic rank,
// offset.
func before(a *inMsg, ar int, b *inMsg, br int) bool {
	if at, bt := mergeTime(a), mergeTime(b); !at.Equal(bt) {
		return at.Before(bt)
	}
	if ta, tb := typeRank(a), typeRank(b); ta != tb {
		return ta < tb
	}
	if ar != br {
		return ar < br
	}
	return a.offset < b.offset
}
