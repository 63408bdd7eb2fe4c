package chsink

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/retry"
	"github.com/harnessflow/harnessflow/schemas"
)

// job is one table buffer handed to the inserter, with its lowest offset
// per partition: those offsets are not committed before the job is done
// (inserted and, for task_attempts, its cells' cell_scores recomputed).
// Once a task_attempts job is inserted, its parts (one per project,
// recompute.go) hold its partitions instead, each at its own lowest offset
// until it is done.
type job struct {
	t       *table
	rows    []row
	bytes   int
	pending map[tp]int64
	done    atomic.Bool

	// task_attempts with recomputation: parts is set by the inserter
	// before it sets inserted, and read by the loop only after it sees
	// inserted; left counts the parts not done.
	parts    []*part
	left     atomic.Int32
	inserted atomic.Bool
}

// tp is a topic partition.
type tp struct {
	topic     string
	partition int
}

// buffer holds one table's rows awaiting insert.
type buffer struct {
	rows    []row
	bytes   int
	first   time.Time    // when the oldest row arrived
	pending map[tp]int64 // lowest buffered offset per partition
}

// add decodes m and buffers its row; it reports whether a buffer is now due
// for flushing by size (its table's, or the total bound). It returns an
// error, having buffered and recorded nothing of m, only when m is
// Confluent-framed and the schema registry could not be asked (decode).
func (s *Sink) add(ctx context.Context, m kafka.Message) (bool, error) {
	ev, err := s.decode(ctx, m)
	if errors.Is(err, schemas.ErrRegistryUnavailable) || (err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		return false, err
	}
	k := tp{m.Topic, m.Partition}
	if cur, ok := s.fetched[k]; !ok || m.Offset > cur {
		s.fetched[k] = m.Offset
	}
	if _, ok := s.first[k]; !ok {
		s.first[k] = m.Offset
	}
	s.noteBehind(k, m)
	md := meta{topic: m.Topic, partition: int32(m.Partition), offset: m.Offset}
	var t *table
	if err == nil {
		t, ev = tableFor(ev)
		if t == nil {
			err = fmt.Errorf("%w: no table for event type", schemas.ErrUnknownType)
		}
	}
	if err != nil {
		ev, t = s.rejection(m, err), tRejected
		s.m.rejected.WithLabelValues(m.Topic).Inc()
		s.addStats(func(st *Stats) { st.Rejected++ })
	}
	b := s.bufs[t]
	if b == nil {
		b = &buffer{pending: map[tp]int64{}}
		s.bufs[t] = b
	}
	if len(b.rows) == 0 {
		b.first = time.Now()
	}
	if _, ok := b.pending[k]; !ok {
		b.pending[k] = m.Offset
	}
	b.rows = append(b.rows, row{ev: ev, m: md})
	b.bytes += len(m.Value) + 64
	s.buffered++
	s.m.buffered.Set(float64(s.buffered))
	return len(b.rows) >= s.cfg.MaxRows || b.bytes >= s.cfg.MaxBytes || s.buffered > s.cfg.MaxBufferedRows, nil
}

// decode decodes m's value: Avro single-object, or Confluent-framed through
// the schema registry (Config.SchemaRegistry). While the registry cannot be
// asked it tries again, blocking the loop like an insert that ClickHouse
// refuses, bounded by RetryMaxElapsed: then it returns that error (wrapping
// schemas.ErrRegistryUnavailable), or ctx's error if ctx ended first.
// Nothing is rejected for an unavailable registry.
func (s *Sink) decode(ctx context.Context, m kafka.Message) (schemas.Event, error) {
	if !schemas.IsConfluent(m.Value) {
		return schemas.Decode(m.Value)
	}
	var ev schemas.Event
	var derr error
	policy := retry.Policy{Initial: 100 * time.Millisecond, Max: s.cfg.RetryMaxInterval, MaxElapsed: s.cfg.RetryMaxElapsed}
	err := retry.Do(ctx, policy, func() error {
		ev, derr = s.dec.Decode(ctx, m.Value)
		if errors.Is(derr, schemas.ErrRegistryUnavailable) {
			if ctx.Err() != nil {
				return retry.Permanent(ctx.Err())
			}
			return derr
		}
		return nil
	}, func(err error, wait time.Duration) {
		s.m.registryErrors.Inc()
		s.log.Warn().Err(err).Str("topic", m.Topic).Int("partition", m.Partition).Int64("offset", m.Offset).Dur("retry_in", wait).
			Msg("schema registry unavailable; decoding the message again (nothing is rejected)")
	})
	if err != nil {
		return nil, fmt.Errorf("decode %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	return ev, derr
}

// noteBehind records how far m's partition is from its high watermark
// after m (kafka-go stamps each message with its fetch's watermark; 0 when
// unknown, which counts as caught up).
func (s *Sink) noteBehind(k tp, m kafka.Message) {
	n := max(m.HighWaterMark-(m.Offset+1), 0)
	if m.HighWaterMark == 0 {
		n = 0
	}
	old, seen := s.behind[k]
	if seen && old == n && n == 0 {
		return // caught up and still: the common case, no write
	}
	if (old > 0) != (n > 0) {
		if n > 0 {
			s.lagging++
		} else {
			s.lagging--
		}
	}
	s.behind[k] = n
	if n > 0 {
		s.behindAt[k] = time.Now()
	} else if old > 0 {
		delete(s.behindAt, k)
	}
}

// forgetStale stops counting the partitions behind that were not read for
// MaxAge (now): revoked, or read by a fetcher that is not keeping up, where
// flushing at MinAge is harmless.
func (s *Sink) forgetStale(now time.Time) {
	for k, at := range s.behindAt {
		if now.Sub(at) > s.cfg.MaxAge {
			delete(s.behindAt, k)
			s.behind[k] = 0
			s.lagging--
		}
	}
}

// flushDue inserts every table whose buffer is full or old enough (all of
// them when all is set, or when the total bound is reached: the largest
// first), then commits what became safe to commit. Old enough is MaxAge,
// or MinAge when dry: the fetcher has nothing queued and every partition
// is read up to its high watermark.
func (s *Sink) flushDue(ctx context.Context, r *kafka.Reader, all, dry bool) error {
	now := time.Now()
	flushed := false
	age := s.cfg.MaxAge
	if dry && s.lagging > 0 {
		s.forgetStale(now)
	}
	if dry && s.lagging == 0 && s.cfg.MinAge > 0 && s.cfg.MinAge < age {
		age = s.cfg.MinAge
	}
	for _, t := range tables {
		b := s.bufs[t]
		if b == nil || len(b.rows) == 0 {
			continue
		}
		if all || len(b.rows) >= s.cfg.MaxRows || b.bytes >= s.cfg.MaxBytes || now.Sub(b.first) >= age {
			if err := s.flush(ctx, t, b); err != nil {
				return err
			}
			flushed = true
		}
	}
	for s.buffered > s.cfg.MaxBufferedRows {
		var big *table
		for _, t := range tables {
			if b := s.bufs[t]; b != nil && (big == nil || len(b.rows) > len(s.bufs[big].rows)) {
				big = t
			}
		}
		if err := s.flush(ctx, big, s.bufs[big]); err != nil {
			return err
		}
		flushed = true
	}
	if flushed || all {
		return s.commit(ctx, r)
	}
	return nil
}

// flush hands one table's buffer to the inserters (blocking while every
// inserter is busy and another batch is queued); its offsets stay
// uncommitted until the job is done.
func (s *Sink) flush(ctx context.Context, t *table, b *buffer) error {
	n := len(b.rows)
	j := &job{t: t, rows: b.rows, bytes: b.bytes, pending: b.pending}
	s.inflight.Add(1)
	select {
	case s.ins <- j:
	case err := <-s.workErr:
		s.inflight.Add(-1)
		return err
	case <-ctx.Done():
		// The rows stay in the buffer, so the drain that follows a
		// cancellation flushes them (a job left awaiting with no inserter
		// would hold the drain until its timeout).
		s.inflight.Add(-1)
		return &InsertError{Table: t.name, Rows: n, Err: ctx.Err()}
	}
	// Only this goroutine reads awaiting and the buffers (commit), so the
	// job may be done before it is listed: pruneAwaiting drops it then.
	s.awaiting = append(s.awaiting, j)
	b.rows = make([]row, 0, n)
	b.bytes = 0
	b.pending = map[tp]int64{}
	s.buffered -= n
	s.m.buffered.Set(float64(s.buffered))
	return nil
}

// pruneAwaiting drops the jobs that are done.
func (s *Sink) pruneAwaiting() {
	w := 0
	for _, j := range s.awaiting {
		if !j.done.Load() {
			s.awaiting[w] = j
			w++
		}
	}
	clear(s.awaiting[w:])
	s.awaiting = s.awaiting[:w]
}

// commit commits, per partition, the highest offset below every buffered
// (uncommitted) row of that partition in any table, or of an insert whose
// cell_scores recomputation is not done (for an inserted task_attempts job,
// below the rows of its parts not done: another project's slow cells hold
// only the partitions their rows are in).
func (s *Sink) commit(ctx context.Context, r *kafka.Reader) error {
	s.pruneAwaiting()
	var msgs []kafka.Message
	for k, hi := range s.fetched {
		upto := hi
		for _, b := range s.bufs {
			if lo, ok := b.pending[k]; ok && lo-1 < upto {
				upto = lo - 1
			}
		}
		for _, j := range s.awaiting {
			if !j.inserted.Load() {
				if lo, ok := j.pending[k]; ok && lo-1 < upto {
					upto = lo - 1
				}
				continue
			}
			for _, p := range j.parts {
				if lo, ok := p.pending[k]; ok && lo-1 < upto && !p.done.Load() {
					upto = lo - 1
				}
			}
		}
		if c, ok := s.committed[k]; (ok && upto <= c) || upto < 0 {
			continue
		}
		msgs = append(msgs, kafka.Message{Topic: k.topic, Partition: k.partition, Offset: upto})
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		return &kafkaError{fmt.Errorf("commit offsets: %w", err)}
	}
	var n int64
	for _, m := range msgs {
		k := tp{m.Topic, m.Partition}
		prev, ok := s.committed[k]
		if !ok {
			prev = s.first[k] - 1
		}
		if m.Offset > prev {
			n += m.Offset - prev
		}
		s.committed[k] = m.Offset
	}
	s.addStats(func(st *Stats) { st.Commits++; st.Committed += n })
	return nil
}
