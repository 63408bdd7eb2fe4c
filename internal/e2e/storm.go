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

// cleanAgain runs the clean throughput load once more after the storm and
// sets the storm's clean rate to the mean of the runs before and after it.
func (b *bench) cleanAgain(ctx context.Context, p plan, st *Storm) error {
	b.pr("storm: the clean load again, after the storm, so that clean runs bracket it")
	b.quiesce(ctx, "clean again", 2*time.Minute)
	ph, err := b.phase(ctx, "tp2", p, 10, nil, 0)
	if err != nil {
		return fmt.Errorf("clean run after the storm: %w", err)
	}
	st.CleanAfterPerS = div(float64(ph.Events), ph.VisibleS)
	st.CleanPerS = (st.CleanBeforePerS + st.CleanAfterPerS) / 2
	st.RateRatio = div(st.E2EEventsPerS, st.CleanPerS)
	b.pr("storm: clean %.0f events/s before, %.0f after; storm %.0f: ratio %.3f to their mean",
		st.CleanBeforePerS, st.CleanAfterPerS, st.E2EEventsPerS, st.RateRatio)
	return nil
}

// storm runs the throughput load again with malformed messages mixed in,
// then checks each one is in rejected_events with its reason code.
func (b *bench) storm(ctx context.Context, p plan, clean float64) (*Storm, error) {
	cfg := b.cfg
	b.pr("storm: %d events in 10 chunks with %.2g %% malformed messages mixed in", 10*p.events, cfg.MalformedPct)
	in := newInjector(b.cl.Brokers(), b.prefix("st"), cfg.MalformedPct)
	b.quiesce(ctx, "storm", 2*time.Minute)
	ph, err := b.phase(ctx, "st", p, 10, in, 0)
	if ph == nil {
		return nil, err
	}
	st := &Storm{MalformedPct: cfg.MalformedPct, Events: ph.Events, MalformedSent: in.sent, SentByReason: in.byCode,
		CleanPerS: clean, CleanBeforePerS: clean, Phase: *ph, DLQByReason: map[string]int{}}
	if ph.VisibleS > 0 {
		st.E2EEventsPerS = float64(ph.Events) / ph.VisibleS
		st.RateRatio = div(st.E2EEventsPerS, clean)
	}
	phaseErr := err
	// Every marker (checked also when the phase did not complete), with the processors' stage and reason (the sink's own
	// decode failure of the same message is counted beside it).
	q := "SELECT extract(payload, '" + b.prefix("st") + "mal-[0-9]+') AS m, groupUniqArrayIf(stage, source != 'sink'), " +
		"groupUniqArrayIf(reason_code, source != 'sink'), countIf(source = 'sink') FROM rejected_events " +
		"WHERE payload LIKE '%" + b.prefix("st") + "mal-%' GROUP BY m"
	rows, err := b.cl.Conn().Query(ctx, q)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	var bad []string
	for rows.Next() {
		var m string
		var stages, codes []string
		var sinkRows uint64
		if err := rows.Scan(&m, &stages, &codes, &sinkRows); err != nil {
			return st, err
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
		return st, err
	}
	for m := range in.byMark {
		if !seen[m] {
			bad = append(bad, m+": not in rejected_events")
		}
	}
	b.pr("storm: end to end %.0f events/s vs clean %.0f (ratio %.3f); %d malformed sent, %d in rejected_events %v",
		st.E2EEventsPerS, clean, st.RateRatio, st.MalformedSent, st.DLQRows, st.DLQByReason)
	if len(bad) > 0 {
		n := len(bad)
		if n > 10 {
			bad = append(bad[:10], fmt.Sprintf("... %d more", n-10))
		}
		return st, errors.Join(phaseErr, fmt.Errorf("%w: %d of %d: %v", ErrDLQ, n, in.sent, bad))
	}
	return st, phaseErr
}
