package chddl_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
)

// capIDs returns n distinct cell ids of 256 bytes (the schemas cap on ids),
// each full of quotes, so that every quoted literal is twice as long.
func capIDs(n int) []string { return quoteIDs(n, 256) }

// quoteIDs returns n distinct cell ids of size bytes, quotes after a prefix.
func quoteIDs(n, size int) []string {
	ids := make([]string, n)
	for i := range ids {
		p := "c" + strings.Repeat("0", 4)
		s := p + string(rune('0'+i%10)) + string(rune('a'+i/10%26)) + string(rune('a'+i/260))
		ids[i] = s + strings.Repeat("'", size-len(s))
	}
	return ids
}

// recordingSession keeps the statements it is given and runs none.
type recordingSession struct{ stmts []string }

func (r *recordingSession) Exec(_ context.Context, q string) error {
	r.stmts = append(r.stmts, q)
	return nil
}

func (r *recordingSession) QueryStrings(context.Context, string) ([]string, [][]string, error) {
	return nil, nil, nil
}

// TestRecomputeCellScoresWithLongIDs: 500 cells whose ids are at the
// 256-byte cap and all quotes, then 500 of 1 KiB (rows written before the
// cap existed): 500 of the latter made one statement of ~1 MB, above
// ClickHouse's max_query_size (262144), which the server refuses as a
// syntax error, and the sink stopped on it.
func TestRecomputeCellScoresWithLongIDs(t *testing.T) {
	for _, size := range []int{256, 1024} {
		t.Run(strconv.Itoa(size), func(t *testing.T) { recomputeLongIDs(t, size) })
	}
}

func recomputeLongIDs(t *testing.T, size int) {
	ch := migrated(t)
	ctx := context.Background()
	ids := quoteIDs(500, size)
	f := fixture{}
	for _, id := range ids[:3] {
		f.add("task_attempts", attemptRow(id, "t1", 1, "ok", true, true, 0, 1))
	}
	f.insert(t, ch.Conn, 1)
	if err := chddl.RecomputeCells(ctx, chx.Session(ch.Conn), ch.Database, keysOf("p", ids...)); err != nil {
		t.Fatal(err)
	}
	expect(t, ch.Conn, "SELECT count() FROM cell_scores FINAL", "3")
}
func TestRecomputeStatementsStayUnderMaxQuerySize(t *testing.T) {
	ids := capIDs(2000)
	rs := &recordingSession{}
	if err := chddl.RecomputeCells(context.Background(), rs, "harnessflow", keysOf("p", ids...)); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for i, s := range rs.stmts {
		if len(s) > chddl.MaxStatementBytes {
			t.Errorf("statement %d is %d bytes, above %d", i, len(s), chddl.MaxStatementBytes)
		}
		seen += strings.Count(s, strings.Repeat(`\'`, 200))
	}
	// Each statement names its cells twice: in the rates and in the version.
	if seen != 2*len(ids) {
		t.Fatalf("the statements name %d cells, want each of %d twice", seen, len(ids))
	}
	if chddl.MaxStatementBytes > 262144/2 {
		t.Fatalf("MaxStatementBytes %d is not well under max_query_size (262144)", chddl.MaxStatementBytes)
	}
}

func TestRecomputeSkipsAnIDThatFitsNoStatement(t *testing.T) {
	rs := &recordingSession{}
	huge := strings.Repeat("x", chddl.MaxStatementBytes)
	if err := chddl.RecomputeCells(context.Background(), rs, "harnessflow", keysOf("p", "a", huge, "b")); err != nil {
		t.Fatal(err)
	}
	if len(rs.stmts) != 1 || !strings.Contains(rs.stmts[0], "('p', 'a'), ('p', 'b')") || len(rs.stmts[0]) > chddl.MaxStatementBytes {
		t.Fatalf("statements %d, first %d bytes", len(rs.stmts), len(rs.stmts[0]))
	}
}

// keysOf returns the keys of cells ids of project.
func keysOf(project string, ids ...string) []chddl.CellKey {
	out := make([]chddl.CellKey, len(ids))
	for i, id := range ids {
		out[i] = chddl.CellKey{Project: project, CellID: id}
	}
	return out
}
