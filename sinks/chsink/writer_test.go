package chsink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// TestConnWriterSendsLargeBatchesInBlocks writes batches of several sizes
// around chsink.BlockRows through the real writer: every row arrives once
// with its values in place, and a batch sent as several blocks is still one
// part (the server squashes the blocks of one INSERT).
func TestConnWriterSendsLargeBatchesInBlocks(t *testing.T) {
	ch := testenv.ClickHouse(t)
	ctx := context.Background()
	conn := &blockCounter{Conn: ch.Conn}
	w := chsink.NewConnWriter(conn, ch.Database)
	for _, n := range []int{0, 1, chsink.BlockRows, chsink.BlockRows + 1, 2*chsink.BlockRows + 123} {
		table := fmt.Sprintf("wb_%d", n)
		if err := ch.Conn.Exec(ctx, "CREATE TABLE "+table+" (id UInt64, s String, x Float64) ENGINE = MergeTree ORDER BY id"); err != nil {
			t.Fatal(err)
		}
		ids, ss, xs := make([]uint64, n), make([]string, n), make([]float64, n)
		var wantSum uint64
		for i := range n {
			ids[i], ss[i], xs[i] = uint64(i), fmt.Sprintf("row-%d", i), float64(i)/2
			wantSum += uint64(i)
		}
		conn.blocks = nil
		if err := w.WriteBatch(ctx, table, []string{"id", "s", "x"}, []any{ids, ss, xs}); err != nil {
			t.Fatalf("%d rows: %v", n, err)
		}
		// Every block but the last is flushed, full.
		if want := max(0, (n-1)/chsink.BlockRows); len(conn.blocks) != want {
			t.Fatalf("%d rows: %d blocks flushed before the last (%v), want %d", n, len(conn.blocks), conn.blocks, want)
		}
		for _, r := range conn.blocks {
			if r != chsink.BlockRows {
				t.Fatalf("%d rows: flushed blocks of %v rows, want %d each", n, conn.blocks, chsink.BlockRows)
			}
		}
		var rows, uniq, sum, bad uint64
		q := "SELECT count(), uniqExact(id), sum(id), countIf(s != concat('row-', toString(id)) OR x != id / 2) FROM " + table
		if err := ch.Conn.QueryRow(ctx, q).Scan(&rows, &uniq, &sum, &bad); err != nil {
			t.Fatal(err)
		}
		if rows != uint64(n) || uniq != uint64(n) || sum != wantSum || bad != 0 {
			t.Fatalf("%d rows written: count %d, distinct ids %d, sum %d (want %d), %d rows with wrong values", n, rows, uniq, sum, wantSum, bad)
		}
		parts, err := count(ch.Conn, "SELECT count() FROM system.parts WHERE active AND database = '"+ch.Database+"' AND table = '"+table+"'")
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(min(n, 1)); parts != want {
			t.Fatalf("%d rows written: %d active parts, want %d", n, parts, want)
		}
	}
}

// TestConnWriterRejectsRaggedColumns: columns of different lengths are an
// error that names them, and nothing is written.
func TestConnWriterRejectsRaggedColumns(t *testing.T) {
	ch := testenv.ClickHouse(t)
	ctx := context.Background()
	if err := ch.Conn.Exec(ctx, "CREATE TABLE ragged (id UInt64, s String) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	w := chsink.NewConnWriter(ch.Conn, ch.Database)
	err := w.WriteBatch(ctx, "ragged", []string{"id", "s"}, []any{make([]uint64, chsink.BlockRows+5), make([]string, 3)})
	if err == nil || !strings.Contains(err.Error(), "column s") {
		t.Fatalf("WriteBatch of ragged columns = %v, want an error naming column s", err)
	}
	if n, err := count(ch.Conn, "SELECT count() FROM ragged"); err != nil || n != 0 {
		t.Fatalf("ragged batch left %d rows (%v), want 0", n, err)
	}
}

// blockCounter records the rows of every block a batch flushes before Send.
type blockCounter struct {
	driver.Conn
	blocks []int
}

func (c *blockCounter) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	b, err := c.Conn.PrepareBatch(ctx, query, opts...)
	if err != nil {
		return nil, err
	}
	return &countingBatch{Batch: b, c: c}, nil
}

type countingBatch struct {
	driver.Batch
	c *blockCounter
}

func (b *countingBatch) Flush() error {
	b.c.blocks = append(b.c.blocks, b.Batch.Rows())
	return b.Batch.Flush()
}
