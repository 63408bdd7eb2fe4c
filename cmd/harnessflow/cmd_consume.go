package main

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
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

func init() { register(newConsumeCmd) }

func newConsumeCmd() *cobra.Command {
	var o consumeOptions
	var brokers string
	cmd := &cobra.Command{
		Use:   "consume --topic TOPIC",
		Short: "Print a topic's events as JSONL (the kcat of harnessflow)",
		Long: `consume reads every partition of one topic (no consumer group, nothing committed),
decodes each message, DLQ included, and prints its JSON form, one event per line,
on stdout. Without --from-beginning it starts at the end of each partition as of
start-up. It exits after --max events, after --idle-timeout without a new message,
or on SIGINT/SIGTERM. A message that does not decode is reported on stderr with
its topic, partition and offset, and skipped.`,
		Example: "  harnessflow consume --brokers 127.0.0.1:9092 --topic hf.dlq --from-beginning --idle-timeout 2s",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.topic == "" {
				return withCode(2, errors.New("--topic is required"))
			}
			if o.max < 0 || o.idle < 0 {
				return withCode(2, errors.New("--max and --idle-timeout must not be negative"))
			}
			o.brokers = kafkax.ParseBrokers(brokers)
			return runConsume(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "127.0.0.1:9092", "Kafka brokers, host:port[,host:port]")
	f.StringVar(&o.topic, "topic", "", "topic to read (e.g. hf.attempts, hf.dlq)")
	f.BoolVar(&o.fromBeginning, "from-beginning", false, "start at the first stored offset instead of the end")
	f.IntVar(&o.max, "max", 0, "exit after this many events (0: no limit)")
	f.DurationVar(&o.idle, "idle-timeout", 0, "exit after this long without a new message (0: never)")
	f.StringVar(&o.registry, "schema-registry", "", "schema registry URL, to decode Confluent-framed messages")
	f.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "how long to wait for a reachable broker")
	return cmd
}

type consumeOptions struct {
	brokers        []string
	topic          string
	fromBeginning  bool
	max            int
	idle           time.Duration
	registry       string
	connectTimeout time.Duration
}

type consumedMsg struct {
	msg kafka.Message
	err error
}

func runConsume(ctx context.Context, stdout, stderr io.Writer, o consumeOptions) error {
	if err := kafkax.WaitReachable(ctx, o.brokers, o.connectTimeout); err != nil {
		return withCode(2, err)
	}
	decode, err := consumeDecoder(o.registry)
	if err != nil {
		return withCode(2, err)
	}
	starts, err := consumeStarts(ctx, o.brokers, o.topic, o.fromBeginning)
	if err != nil {
		return withCode(2, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan consumedMsg, 256)
	var wg sync.WaitGroup
	for part, off := range starts {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:          o.brokers,
			Topic:            o.topic,
			Partition:        part,
			MinBytes:         1,
			MaxBytes:         8 << 20,
			MaxWait:          100 * time.Millisecond,
			ReadBatchTimeout: 5 * time.Second,
			QueueCapacity:    256,
			ReadBackoffMin:   50 * time.Millisecond,
			ReadBackoffMax:   500 * time.Millisecond,
			MaxAttempts:      3,
		})
		if err := r.SetOffset(off); err != nil {
			r.Close()
			return withCode(2, fmt.Errorf("seek %s/%d to %d: %w", o.topic, part, off, err))
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
				case msgs <- consumedMsg{msg: m, err: err}:
				case <-rctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	defer wg.Wait()
	defer cancel()

	out := bufio.NewWriterSize(stdout, 64<<10)
	defer out.Flush()
	var idle <-chan time.Time
	var timer *time.Timer
	if o.idle > 0 {
		timer = time.NewTimer(o.idle)
		defer timer.Stop()
		idle = timer.C
	}
	printed := 0
	for o.max == 0 || printed < o.max {
		select {
		case <-ctx.Done():
			return nil
		case <-idle:
			return nil
		case c := <-msgs:
			if timer != nil {
				timer.Reset(o.idle)
			}
			m := c.msg
			if c.err != nil {
				out.Flush()
				return withCode(2, fmt.Errorf("read %s: %w", o.topic, c.err))
			}
			ev, err := decode(ctx, m.Value)
			var line []byte
			if err == nil {
				line, err = schemas.MarshalJSON(ev)
			}
			if err != nil {
				out.Flush()
				fmt.Fprintf(stderr, "%s/%d@%d: cannot decode: %v\n", m.Topic, m.Partition, m.Offset, err)
				continue
			}
			out.Write(line)
			out.WriteByte('\n')
			printed++
			if len(msgs) == 0 {
				if err := out.Flush(); err != nil {
					return withCode(2, err)
				}
			}
		}
	}
	return nil
}

// consumeStarts returns each partition's first offset to read: the first
// stored one, or the end as of now.
func consumeStarts(ctx context.Context, brokers []string, topic string, fromBeginning bool) (map[int]int64, error) {
	var d kafka.Dialer
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

// consumeDecoder returns the decoder for consumedMsg messages: Avro
// single-object encoding, and the Confluent wire format through the schema
// registry when a URL is given (without one, Confluent-framed messages are
// reported as undecodable).
func consumeDecoder(registry string) (func(context.Context, []byte) (schemas.Event, error), error) {
	d := &schemas.Decoder{}
	if registry != "" {
		d.Registry = schemas.NewRegistry(registry, nil)
	}
	return d.Decode, nil
}
