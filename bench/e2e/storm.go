package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// injector writes one malformed message after every `every` events, to the
// event's topic and partition key, cycling through three kinds: bytes that
// are not Avro (reason malformed), an unknown schema fingerprint
// (unknown_fingerprint) and a truncated task_attempt (malformed). Each one
// carries a marker (<prefix>mal-<n>) in its bytes. It hands them to its
// writer injectBatch at a time, as the SDK hands its batches: a profile of
// the driver put one call per message at about 30 us each, the load
// generator's work and not the pipeline's.
type injector struct {
	prefix  string
	every   int
	w       *kafka.Writer
	pending []kafka.Message
	n       int // events seen
	sent    int
	byMark  map[string]string // marker -> reason code
	byCode  map[string]int

	mu     sync.Mutex
	failed int
	err    error
}

func newInjector(brokers []string, prefix string, pct float64) *injector {
	in := &injector{prefix: prefix, every: max(1, int(100/pct+0.5)), byMark: map[string]string{}, byCode: map[string]int{}}
	in.w = kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, BatchSize: 1000, Async: true,
		Completion: func(msgs []kafka.Message, err error) {
			if err != nil {
				in.mu.Lock()
				in.failed += len(msgs)
				in.err = err
				in.mu.Unlock()
			}
		}})
	return in
}

func (in *injector) after(ctx context.Context, r gen.Record) {
	in.n++
	if in.n%in.every != 0 || r.Topic == schemas.TopicCampaigns {
		return
	}
	mark := fmt.Sprintf("%smal-%d", in.prefix, in.sent)
	var v []byte
	code := schemas.CodeMalformed
	switch in.sent % 3 {
	case 0:
		v = []byte("not avro: " + mark)
	case 1:
		v = append([]byte{schemas.SingleObjectMagic[0], schemas.SingleObjectMagic[1]}, binary.LittleEndian.AppendUint64(nil, 0x0123456789abcdef)...)
		v = append(v, mark...)
		code = schemas.CodeUnknownFingerprint
	default:
		a := &schemas.TaskAttempt{Envelope: schemas.Envelope{EventID: mark, EventTime: r.Time, Project: "proj", Source: "bench-e2e"},
			CellID: r.Event.PartitionKey(), TaskID: "t", Attempt: 1, HarnessVersion: "h0", Status: schemas.StatusOK, Final: true}
		b, err := schemas.Encode(a)
		if err != nil {
			in.mu.Lock()
			in.err = err
			in.mu.Unlock()
			return
		}
		// Cut just after the event id: a truncated record.
		v = b[:min(len(b)-1, 10+2+len(mark)+2)]
	}
	in.pending = append(in.pending, kafka.Message{Topic: r.Topic, Key: []byte(r.Event.PartitionKey()), Value: v})
	in.byMark[mark] = code
	in.byCode[code]++
	in.sent++
	if len(in.pending) >= injectBatch {
		in.flush(ctx)
	}
}

// injectBatch is how many malformed messages the injector hands its writer at
// once: at 1 % of 50 000 events/s, about 130 ms of them.
const injectBatch = 64

func (in *injector) flush(ctx context.Context) {
	if len(in.pending) == 0 {
		return
	}
	if err := in.w.WriteMessages(ctx, in.pending...); err != nil {
		in.mu.Lock()
		in.failed += len(in.pending)
		in.err = err
		in.mu.Unlock()
	}
	in.pending = in.pending[:0]
}

func (in *injector) close(ctx context.Context) error {
	in.flush(ctx)
	err := in.w.Close()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.failed > 0 || in.err != nil {
		return fmt.Errorf("storm: %d malformed messages not written: %w", in.failed, errors.Join(in.err, err))
	}
	return err
}

// stormOrder is the order of the storm's n blocks (a multiple of 4): with
// malformed messages (true) and clean (false), in groups S C C S. Each block
// is a phase of stormChunks chunks from an idle pipeline; each group makes a
// drift of the machine that is linear in time weigh the same on both kinds,
// and adjacent blocks are a few seconds apart instead of the whole run.
func stormOrder(n int) []bool {
	order := make([]bool, 0, n)
	for range n / 4 {
		order = append(order, true, false, false, true)
	}
	return order
}

// stormChunks is the size of one storm block, in chunks of the 1x width.
const stormChunks = 3

// storm runs the storm's blocks (stormOrder): the throughput load with
// malformed messages mixed in, and the same clean load, alternating. Its
// rate is the storm blocks' events over their time to visibility, beside the
// clean blocks' the same way; each group of four gives the same ratio on its
// own (the noise). Every malformed message is checked in rejected_events with
// its reason code.
func (b *bench) storm(ctx context.Context, p plan) (*Storm, error) {
	cfg := b.cfg
	order := stormOrder(cfg.StormBlocks)
	b.pr("storm: %d blocks of %d events, storm and clean alternating in groups S C C S, %.2g %% malformed in the storm's",
		len(order), stormChunks*p.events, cfg.MalformedPct)
	st := &Storm{MalformedPct: cfg.MalformedPct, DLQByReason: map[string]int{}, SentByReason: map[string]int{}}
	var all, group rates
	for i, malformed := range order {
		name := fmt.Sprintf("cl%d", i+1)
		var in *injector
		if malformed {
			name = fmt.Sprintf("st%d", i+1)
			in = newInjector(b.cl.Brokers(), b.prefix(name), cfg.MalformedPct)
		}
		b.quiesce(ctx, name, 2*time.Minute)
		ph, err := b.phase(ctx, name, p, stormChunks, in, 0)
		if ph == nil {
			return st, fmt.Errorf("storm block %s: %w", name, err)
		}
		blk := StormBlock{Name: name, Malformed: malformed, E2EEventsPerS: div(float64(ph.Events), ph.VisibleS), Phase: *ph}
		st.Blocks = append(st.Blocks, blk)
		if malformed {
			st.Events += ph.Events
			if derr := b.checkDLQ(ctx, name, in, st); derr != nil {
				return st, errors.Join(err, derr)
			}
		}
		if err != nil {
			return st, fmt.Errorf("storm block %s: %w", name, err)
		}
		all.add(malformed, ph)
		group.add(malformed, ph)
		b.pr("storm: block %s %.0f events/s", name, blk.E2EEventsPerS)
		if i%4 == 3 {
			st.GroupRatios = append(st.GroupRatios, group.ratio())
			b.pr("storm: group %d ratio %.3f", len(st.GroupRatios), group.ratio())
			group = rates{}
		}
	}
	st.E2EEventsPerS, st.CleanPerS = all.storm(), all.clean()
	st.RateRatio = all.ratio()
	b.pr("storm: end to end %.0f events/s vs clean %.0f (ratio %.3f); %d malformed sent, %d in rejected_events %v",
		st.E2EEventsPerS, st.CleanPerS, st.RateRatio, st.MalformedSent, st.DLQRows, st.DLQByReason)
	return st, nil
}

// rates pools blocks' events and times to visibility, per kind.
type rates struct {
	stormEv, cleanEv int
	stormS, cleanS   float64
}

func (r *rates) add(malformed bool, ph *Phase) {
	if malformed {
		r.stormEv, r.stormS = r.stormEv+ph.Events, r.stormS+ph.VisibleS
	} else {
		r.cleanEv, r.cleanS = r.cleanEv+ph.Events, r.cleanS+ph.VisibleS
	}
}

func (r rates) storm() float64 { return div(float64(r.stormEv), r.stormS) }
func (r rates) clean() float64 { return div(float64(r.cleanEv), r.cleanS) }
func (r rates) ratio() float64 { return div(r.storm(), r.clean()) }

// checkDLQ looks up every malformed message of storm block name in
// rejected_events (checked also when the block did not complete), with the
// processors' stage and reason (the sink's own decode failure of the same
// message is counted beside it), and adds the block's figures to st.
func (b *bench) checkDLQ(ctx context.Context, name string, in *injector, st *Storm) error {
	st.MalformedSent += in.sent
	for code, n := range in.byCode {
		st.SentByReason[code] += n
	}
	q := "SELECT extract(payload, '" + b.prefix(name) + "mal-[0-9]+') AS m, groupUniqArrayIf(stage, source != 'sink'), " +
		"groupUniqArrayIf(reason_code, source != 'sink'), countIf(source = 'sink') FROM rejected_events " +
		"WHERE payload LIKE '%" + b.prefix(name) + "mal-%' GROUP BY m"
	rows, err := b.cl.Conn().Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := map[string]bool{}
	var bad []string
	for rows.Next() {
		var m string
		var stages, codes []string
		var sinkRows uint64
		if err := rows.Scan(&m, &stages, &codes, &sinkRows); err != nil {
			return err
		}
		st.SinkDLQRows += int(sinkRows)
		if len(codes) == 0 {
			continue // only the sink's row: reported missing below
		}
		seen[m] = true
		st.DLQRows++
		st.DLQByReason[strings.Join(codes, "+")]++
		if want, ok := in.byMark[m]; !ok || len(codes) != 1 || codes[0] != want || len(stages) != 1 || stages[0] != "decode" {
			bad = append(bad, fmt.Sprintf("%s: stages %v reasons %v, want decode/%s", m, stages, codes, want))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for m := range in.byMark {
		if !seen[m] {
			bad = append(bad, m+": not in rejected_events")
		}
	}
	if len(bad) > 0 {
		n := len(bad)
		if n > 10 {
			bad = append(bad[:10], fmt.Sprintf("... %d more", n-10))
		}
		return fmt.Errorf("%w: block %s, %d of %d: %v", ErrDLQ, name, n, in.sent, bad)
	}
	return nil
}
