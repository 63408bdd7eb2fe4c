// Package jsonl is the sink to a terminal or a file: it reads every
// partition of one topic (no consumer group, nothing committed), decodes each
// message, dead letters included, and writes its JSON form one event per
// line — the kcat of harnessflow (`harnessflow consume`).
//
// hf.outcomes, the processors' internal topic, is read too: each event of a
// batched record (schemas.OutcomeBatchMagic) is printed on its own line.
//
// A dead letter's line (type "rejected") is its JSON form, whose "payload"
// is the offending bytes in base64, followed by what those bytes hold:
// "payload_event", the payload decoded (Avro single-object, Confluent
// framing with Config.SchemaRegistry, or JSON text that parses as an event)
// in its JSON form; or "payload_error", why it does not decode (cut at the
// payload cap, garbage, Confluent without a registry, JSON that is not a
// valid event, a NaN that JSON cannot carry), then "payload_text", the bytes
// as text when they are printable UTF-8.
package jsonl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// DefaultConnectTimeout is Config.ConnectTimeout's default.
const DefaultConnectTimeout = 10 * time.Second

// Errors of a Config that cannot run.
var (
	ErrNoTopic  = errors.New("no topic given: pass --topic (e.g. hf.attempts, hf.dlq)")
	ErrNegative = errors.New("--max and --idle-timeout must not be negative")
	// ErrNothingDecoded ends a run that read messages and could decode
	// none of them (a topic in a framing this reader does not know, or the
	// Confluent framing without --schema-registry): the run printed nothing
	// and says so with a non-zero exit.
	ErrNothingDecoded = errors.New("no message read could be decoded")
)

// Config says what Consume reads and when it stops.
type Config struct {
	Brokers []string
	// Topic to read, every partition of it.
	Topic string
	// FromBeginning starts at each partition's first stored offset; without
	// it, at the end as of start-up.
	FromBeginning bool
	// Max stops after this many events printed (0: no limit).
	Max int
	// Idle stops after this long without a new message (0: never).
	Idle time.Duration
	// SchemaRegistry is a schema registry URL, to decode Confluent-framed
	// messages (empty: they are reported as undecodable).
	SchemaRegistry string
	// ConnectTimeout is how long to wait for a reachable broker. Default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

type readMsg struct {
	msg kafka.Message
	err error
}

// Consume prints cfg.Topic's events on stdout as JSON lines until
// cfg.Max events, cfg.Idle without a message, or the end of ctx (a clean
// stop, nil); a dead letter's line also shows its payload decoded (see the
// package comment). A message that does not decode is reported on stderr
// with its coordinates and skipped; a run that read messages and decoded
// none returns ErrNothingDecoded; a failed read ends the run with its
// error.
func Consume(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	o := cfg
	if o.Topic == "" {
		return ErrNoTopic
	}
	if o.Max < 0 || o.Idle < 0 {
		return ErrNegative
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if err := kafkax.WaitReachable(ctx, o.Brokers, o.ConnectTimeout); err != nil {
		return err
	}
	decode, err := decoder(o.SchemaRegistry)
	if err != nil {
		return err
	}
	starts, err := startOffsets(ctx, o.Brokers, o.Topic, o.FromBeginning)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan readMsg, 256)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if err := readPartitions(rctx, &wg, o, starts, msgs); err != nil {
		return err
	}

	out := bufio.NewWriterSize(stdout, 64<<10)
	defer out.Flush()
	var idle <-chan time.Time
	var timer *time.Timer
	if o.Idle > 0 {
		timer = time.NewTimer(o.Idle)
		defer timer.Stop()
		idle = timer.C
	}
	printed, undecodable := 0, 0
	var firstErr error
	done := func() error {
		if printed == 0 && undecodable > 0 {
			return fmt.Errorf("%w: %d messages of %s, none an event this reader knows (the first: %w; see stderr)",
				ErrNothingDecoded, undecodable, o.Topic, firstErr)
		}
		return nil
	}
	for o.Max == 0 || printed < o.Max {
		select {
		case <-ctx.Done():
			return done()
		case <-idle:
			return done()
		case c := <-msgs:
			if timer != nil {
				timer.Reset(o.Idle)
			}
			m := c.msg
			if c.err != nil {
				out.Flush()
				return fmt.Errorf("read %s: %w", o.Topic, c.err)
			}
			fail := func(where string, err error) {
				out.Flush()
				fmt.Fprintf(stderr, "%s/%d@%d%s: cannot decode: %v\n", m.Topic, m.Partition, m.Offset, where, err)
				if undecodable == 0 {
					firstErr = err
				}
				undecodable++
			}
			// A batched hf.outcomes record holds several events.
			values := [][]byte{m.Value}
			if schemas.IsOutcomeBatch(m.Value) {
				values = values[:0]
				if err := schemas.SplitOutcomes(m.Value, func(_ time.Time, ev []byte) { values = append(values, ev) }); err != nil {
					fail("", err)
					continue
				}
			}
			for i, v := range values {
				if o.Max > 0 && printed >= o.Max {
					break
				}
				ev, err := decode(ctx, v)
				var line []byte
				if r, ok := ev.(*schemas.Rejected); ok && err == nil {
					line, err = rejectedLine(ctx, decode, r)
				} else if err == nil {
					line, err = schemas.MarshalJSON(ev)
				}
				if err != nil {
					where := ""
					if len(values) > 1 {
						where = fmt.Sprintf(" event %d", i)
					}
					fail(where, err)
					continue
				}
				out.Write(line)
				out.WriteByte('\n')
				printed++
			}
			if len(msgs) == 0 {
				if err := out.Flush(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// readPartitions starts a reader per partition at its start offset, each
// sending what it reads on msgs until ctx ends or a read fails (the failure
// is sent too).
func readPartitions(rctx context.Context, wg *sync.WaitGroup, o Config, starts map[int]int64, msgs chan<- readMsg) error {
	for part, off := range starts {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:          o.Brokers,
			Topic:            o.Topic,
			Partition:        part,
			MinBytes:         1,
			MaxBytes:         8 << 20,
			MaxWait:          100 * time.Millisecond,
			ReadBatchTimeout: 5 * time.Second,
			QueueCapacity:    256,
			ReadBackoffMin:   50 * time.Millisecond,
			ReadBackoffMax:   500 * time.Millisecond,
			MaxAttempts:      3,
			Dialer:           kafkax.Dialer(),
		})
		if err := r.SetOffset(off); err != nil {
			r.Close()
			return fmt.Errorf("seek %s/%d to %d: %w", o.Topic, part, off, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(rctx)
				if rctx.Err() != nil {
					return
				}
				select {
				case msgs <- readMsg{msg: m, err: err}:
				case <-rctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	return nil
}

// startOffsets returns each partition's first offset to read: the first
// stored one, or the end as of now.
func startOffsets(ctx context.Context, brokers []string, topic string, fromBeginning bool) (map[int]int64, error) {
	d := kafkax.Dialer()
	var conn *kafka.Conn
	var err error
	for _, b := range brokers {
		if conn, err = d.DialContext(ctx, "tcp", b); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions", topic)
	}
	starts := map[int]int64{}
	for _, p := range parts {
		lc, err := d.DialLeader(ctx, "tcp", net.JoinHostPort(p.Leader.Host, strconv.Itoa(p.Leader.Port)), topic, p.ID)
		if err != nil {
			return nil, fmt.Errorf("leader of %s/%d: %w", topic, p.ID, err)
		}
		first, last, err := lc.ReadOffsets()
		lc.Close()
		if err != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", topic, p.ID, err)
		}
		if fromBeginning {
			starts[p.ID] = first
		} else {
			starts[p.ID] = last
		}
	}
	return starts, nil
}

// decoder returns the decoder of the topic's messages: Avro
// single-object encoding, and the Confluent wire format through the schema
// registry when a URL is given (without one, Confluent-framed messages are
// reported as undecodable).
func decoder(registry string) (decodeFunc, error) {
	d := &schemas.Decoder{}
	if registry != "" {
		d.Registry = schemas.NewRegistry(registry, nil)
	}
	return d.Decode, nil
}
