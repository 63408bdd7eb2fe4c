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

	"github.com/harnessflow/harnessflow/internal/gen"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// injector writes one malformed message after every `every` events, to the
// event's topic and partition key, cycling through three kinds: bytes that
// are not Avro (reason malformed), an unknown schema fingerprint
// (unknown_fingerprint) and a truncated task_attempt (malformed). Each one
// carries a marker (<prefix>mal-<n>) in its bytes.
type injector struct {
	prefix string
	every  int
	w      *kafka.Writer
	n      int // events seen
	sent   int
	byMark map[string]string // marker -> reason code
	byCode map[string]int

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
	if err := in.w.WriteMessages(ctx, kafka.Message{Topic: r.Topic, Key: []byte(r.Event.PartitionKey()), Value: v}); err != nil {
		in.mu.Lock()
		in.failed++
		in.err = err
		in.mu.Unlock()
		return
	}
	in.byMark[mark] = code
	in.byCode[code]++
	in.sent++
}

func (in *injector) close() error {
	err := in.w.Close()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.failed > 0 || in.err != nil {
		return fmt.Errorf("storm: %d malformed messages not written: %w", in.failed, errors.Join(in.err, err))
	}
	return err
}

// stormOrder is the order of the storm's blocks: with malformed messages
// (true) and clean (false), as S C C S S C C S. Each block is a phase of
// stormChunks chunks from an idle pipeline; the order makes a drift of the
// machine that is linear in time weigh the same on both kinds, and adjacent
// blocks are a few seconds apart instead of the whole run.
var stormOrder = []bool{true, false, false, true, true, false, false, true}

// stormChunks is the size of one storm block, in chunks of the 1x width.
const stormChunks = 3

// storm runs the storm's blocks (stormOrder): the throughput load with
// malformed messages mixed in, and the same clean load, alternating. Its
// rate is the storm blocks' events over their time to visibility, beside the
// clean blocks' the same way. Every malformed message is checked in
// rejected_events with its reason code.
func (b *bench) storm(ctx context.Context, p plan) (*Storm, error) {
	cfg := b.cfg
	b.pr("storm: %d blocks of %d events, storm and clean alternating (S C C S S C C S), %.2g %% malformed in the storm's",
		len(stormOrder), stormChunks*p.events, cfg.MalformedPct)
	st := &Storm{MalformedPct: cfg.MalformedPct, DLQByReason: map[string]int{}, SentByReason: map[string]int{}}
	var cleanEv int
	var stormS, cleanS float64
	for i, malformed := range stormOrder {
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
		if malformed {
			stormS += ph.VisibleS
		} else {
			cleanEv, cleanS = cleanEv+ph.Events, cleanS+ph.VisibleS
		}
		b.pr("storm: block %s %.0f events/s", name, blk.E2EEventsPerS)
	}
	st.E2EEventsPerS = div(float64(st.Events), stormS)
	st.CleanPerS = div(float64(cleanEv), cleanS)
	st.RateRatio = div(st.E2EEventsPerS, st.CleanPerS)
	b.pr("storm: end to end %.0f events/s vs clean %.0f (ratio %.3f); %d malformed sent, %d in rejected_events %v",
		st.E2EEventsPerS, st.CleanPerS, st.RateRatio, st.MalformedSent, st.DLQRows, st.DLQByReason)
	return st, nil
}

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
