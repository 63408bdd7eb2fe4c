package chsink

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
)

// BatchWriter writes one batch of rows into a table, column-wise: data[i] is
// the slice of values of columns[i]. It is what the sink needs from
// ClickHouse (STYLE.md §3); an error leaves the batch unwritten or, at worst,
// written in part (the sink retries it whole: rows deduplicate on event id).
type BatchWriter interface {
	WriteBatch(ctx context.Context, table string, columns []string, data []any) error
}

// CellScorer recomputes the cell_scores summaries of cells from their
// attempts (chddl.RecomputeCellScores). When the sink's BatchWriter also
// implements it, the sink calls it with the cells of every task_attempts
// insert, after the insert and before committing the offsets; a writer
// without it leaves cell_scores alone and the views compute those cells live
// (exact, slower).
type CellScorer interface {
	RecomputeCellScores(ctx context.Context, cells []chddl.CellKey) error
}

// CellVerifier reports which cells' cell_scores summaries are not yet what
// their attempts give (chddl.VerifyCells). On a cluster, when the writer
// implements it, the sink verifies every recomputed cell a little later and
// recomputes it again until it is settled.
type CellVerifier interface {
	VerifyCellScores(ctx context.Context, checks []chddl.CellCheck) ([]chddl.CellKey, error)
}

// ConnWriter is the writer NewConnWriter returns: a BatchWriter that also
// recomputes (CellScorer) and verifies (CellVerifier) cell_scores, so that
// a caller wrapping it sees all it can do.
type ConnWriter interface {
	BatchWriter
	CellScorer
	CellVerifier
}

// connWriter implements ConnWriter over clickhouse-go's native protocol
// with named-column batch inserts into database.
type connWriter struct {
	conn     driver.Conn
	database string
}

// NewConnWriter returns a ConnWriter that inserts into database through conn
// with `INSERT INTO db.table (columns...)` native batches.
func NewConnWriter(conn driver.Conn, database string) ConnWriter {
	return &connWriter{conn: conn, database: database}
}

// BlockRows is the most rows connWriter sends in one native-protocol data
// block: a larger batch goes out as several blocks of one INSERT. The client
// then holds one block's column buffers and compressed frame at a time, not
// the whole batch's, so the sink's memory does not follow the size of its
// largest batch (a batch grows while ClickHouse is slow). The server squashes
// the blocks of an INSERT (min_insert_block_size_rows), so they still make one
// part.
const BlockRows = 16384

func (w *connWriter) WriteBatch(ctx context.Context, table string, columns []string, data []any) error {
	q := "INSERT INTO " + chddl.QuoteIdent(w.database) + "." + chddl.QuoteIdent(table) + " (" + quoteAll(columns) + ")"
	b, err := w.conn.PrepareBatch(ctx, q)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer b.Abort()
	cols := make([]reflect.Value, len(data))
	n := -1
	for i, col := range data {
		cols[i] = reflect.ValueOf(col)
		if cols[i].Kind() != reflect.Slice {
			return fmt.Errorf("column %s: %T is not a slice", columns[i], col)
		}
		if n >= 0 && cols[i].Len() != n {
			return fmt.Errorf("column %s: %d values, column %s has %d", columns[i], cols[i].Len(), columns[0], n)
		}
		n = cols[i].Len()
	}
	for lo := 0; ; lo += BlockRows {
		hi := min(lo+BlockRows, n)
		for i := range cols {
			col := data[i]
			if lo > 0 || hi < n {
				col = cols[i].Slice(lo, hi).Interface()
			}
			if err := b.Column(i).Append(col); err != nil {
				return &encodeError{fmt.Errorf("column %s: %w", columns[i], err)}
			}
		}
		if hi >= n {
			break
		}
		if err := b.Flush(); err != nil {
			return fmt.Errorf("send the block at row %d: %w", lo, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

func quoteAll(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = chddl.QuoteIdent(c)
	}
	return strings.Join(q, ", ")
}

func (w *connWriter) VerifyCellScores(ctx context.Context, checks []chddl.CellCheck) ([]chddl.CellKey, error) {
	return chddl.VerifyCells(ctx, chx.Session(w.conn), w.database, checks)
}

func (w *connWriter) RecomputeCellScores(ctx context.Context, cells []chddl.CellKey) error {
	return chddl.RecomputeCells(ctx, chx.Session(w.conn), w.database, cells)
}
