package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// peer lets ClickHouse's own Kafka table engine read the task attempts of
// the throughput phase's first chunk, as JSONEachRow rows of the same
// columns, from the same broker, into a twin of task_attempts (through a
// materialized view), and times it. Whatever happens is recorded in Peer.
func (b *bench) peer(ctx context.Context, p plan) Peer {
	out := Peer{Engine: "Kafka (JSONEachRow)", Table: "task_attempts_peer"}
	fail := func(status string, err error) Peer {
		out.Status = status
		out.Reason = err.Error()
		b.pr("peer: %s: %s", status, firstLine(out.Reason))
		return out
	}
	topic := "hf.e2e-peer-" + b.run
	n, err := b.peerProduce(ctx, p, topic, &out.Rows)
	if err != nil {
		return fail("error", err)
	}
	conn := b.cl.Conn()
	db := chddl.QuoteIdent(b.cl.Database())
	if status, err := b.peerTables(ctx, topic); err != nil {
		return fail(status, err)
	}
	defer func() {
		for _, q := range []string{"DROP TABLE IF EXISTS " + db + ".task_attempts_peer_mv", "DROP TABLE IF EXISTS " + db + ".task_attempts_peer_queue"} {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := conn.Exec(dctx, q); err != nil {
				b.log.Warn().Err(err).Str("query", q).Msg("peer cleanup")
			}
			cancel()
		}
	}()
	b.pr("peer: Kafka engine table reading %d JSONEachRow attempts from %s", n, topic)
	t0 := time.Now()
	mv := "CREATE MATERIALIZED VIEW " + db + ".task_attempts_peer_mv TO " + db + ".task_attempts_peer AS SELECT * FROM " + db + ".task_attempts_peer_queue"
	if err := conn.Exec(ctx, mv); err != nil {
		return fail("error", fmt.Errorf("%s: %w", mv, err))
	}
	first := 20 * time.Second // no row by then: it cannot talk to the broker
	for {
		var got uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".task_attempts_peer").Scan(&got); err != nil {
			return fail("error", err)
		}
		out.RowsVisible = int(got)
		el := time.Since(t0)
		if int(got) >= n {
			out.Seconds = el.Seconds()
			out.RowsPerS = float64(got) / el.Seconds()
			out.Status = "ok"
			b.pr("peer: Kafka engine %.0f rows/s (%d rows in %.1fs; flushes every stream_flush_interval_ms)", out.RowsPerS, got, out.Seconds)
			return out
		}
		if (got == 0 && el > first) || el > b.cfg.PeerTimeout {
			why := fmt.Errorf("%d of %d rows after %s", got, n, el.Round(time.Second))
			if l := b.serverLogKafka(); l != "" {
				why = fmt.Errorf("%w; server log: %s", why, l)
			}
			return fail("timeout", why)
		}
		select {
		case <-ctx.Done():
			return fail("error", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// peerProduce writes the task attempts of p's first throughput chunk to a
// new topic as JSONEachRow rows of task_attempts' columns; it sets *rows to
// their number before anything can fail, and returns how many it wrote.
func (b *bench) peerProduce(ctx context.Context, p plan, topic string, rows *int) (int, error) {
	var attempts []schemas.Event
	for _, r := range b.chunk(p, "tp", 0).Records {
		if r.Topic == schemas.TopicAttempts {
			attempts = append(attempts, r.Event)
		}
	}
	*rows = len(attempts)
	_, cols, data, err := chsink.BuildColumns(attempts)
	if err != nil {
		return 0, err
	}
	if err := kafkax.EnsureTopics(ctx, b.cl.Brokers(), []kafkatopics.Topic{{Name: topic, Class: kafkatopics.Internal, Partitions: 6, ReplicationFactor: 1}}); err != nil {
		return 0, fmt.Errorf("create %s: %w", topic, err)
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: b.cl.Brokers(), Topic: topic, BatchSize: 5000, BatchBytes: 8 << 20})
	defer w.Close()
	msgs := make([]kafka.Message, 0, len(attempts))
	for i := range attempts {
		row := map[string]any{}
		for c, name := range cols {
			v := reflect.ValueOf(data[c]).Index(i).Interface()
			if t, ok := v.(time.Time); ok {
				v = t.UTC().Format("2006-01-02 15:04:05")
			}
			row[name] = v
		}
		j, err := json.Marshal(row)
		if err != nil {
			return 0, err
		}
		msgs = append(msgs, kafka.Message{Key: []byte(attempts[i].PartitionKey()), Value: j})
	}
	for i := 0; i < len(msgs); i += 5000 {
		if err := w.WriteMessages(ctx, msgs[i:min(i+5000, len(msgs))]...); err != nil {
			return 0, fmt.Errorf("produce JSONEachRow to %s: %w", topic, err)
		}
	}
	return len(msgs), nil
}

// peerTables (re)creates the twin task_attempts_peer and the Kafka engine
// queue table over topic, with task_attempts' columns read from the server.
// On failure it returns the Peer status: "unavailable" when this server
// cannot create a Kafka engine table, else "error".
func (b *bench) peerTables(ctx context.Context, topic string) (status string, err error) {
	conn := b.cl.Conn()
	db := chddl.QuoteIdent(b.cl.Database())
	rows, err := conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = 'task_attempts'", b.cl.Database())
	if err != nil {
		return "error", err
	}
	var defs []string
	for rows.Next() {
		var n, t string
		if err := rows.Scan(&n, &t); err != nil {
			rows.Close()
			return "error", err
		}
		defs = append(defs, chddl.QuoteIdent(n)+" "+t)
	}
	rows.Close()
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + db + ".task_attempts_peer_mv",
		"DROP TABLE IF EXISTS " + db + ".task_attempts_peer_queue",
		"DROP TABLE IF EXISTS " + db + ".task_attempts_peer",
		"CREATE TABLE " + db + ".task_attempts_peer AS " + db + ".task_attempts",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			return "error", fmt.Errorf("%s: %w", q, err)
		}
	}
	qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	queue := "CREATE TABLE " + db + ".task_attempts_peer_queue (" + strings.Join(defs, ", ") + ") ENGINE = Kafka('" +
		b.cl.Brokers()[0] + "', '" + topic + "', '" + b.run + "-peer', 'JSONEachRow')"
	if err := conn.Exec(qctx, queue); err != nil {
		return "unavailable", fmt.Errorf("this clickhouse-server cannot create a Kafka engine table: %w", err)
	}
	return "", nil
}

// serverLogKafka returns the last clickhouse-server log lines mentioning
// Kafka, if the managed server's log can be found under Dir.
func (b *bench) serverLogKafka() string {
	var lines []string
	_ = filepath.Walk(filepath.Join(b.cfg.Dir, "clickhouse"), func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(path, ".log") || info.Size() > 256<<20 {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "Kafka") || strings.Contains(l, "rdk") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
		return nil
	})
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
