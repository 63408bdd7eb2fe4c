package chddl

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// RecomputeChunk is how many cells one RecomputeCellScores statement covers.
const RecomputeChunk = 500

// recomputeSQL writes the cell_scores rows of the listed cells from their
// deduplicated attempts: the per-task step and the per-cell step of
// v_cell_scores' live definition (0002_views.sql), word for word.
const recomputeSQL = `INSERT INTO %[1]s.cell_scores (cell_id, n_tasks, pass_rate, pass_rate_final, mean_score, mean_score_final, _version, _computed_at)
SELECT
    cell_id,
    count() AS c_n_tasks,
    100 * avg(t_first) AS c_pass_rate,
    100 * avg(t_final) AS c_pass_rate_final,
    100 * avg(t_first_score) AS c_mean_score,
    100 * avg(t_final_score) AS c_mean_score_final,
    toUInt64(%[2]d) AS c_version,
    now() AS c_computed_at
FROM
(
    SELECT
        cell_id,
        task_id,
        argMaxIf(success = 1 AND status = 'ok', _version, attempt = 1) AS t_first,
        argMaxIf(if(status = 'ok', score, 0), _version, attempt = 1) AS t_first_score,
        argMaxIf(success = 1 AND status = 'ok', _version, final = 1) AS t_final,
        argMaxIf(if(status = 'ok', score, 0), _version, final = 1) AS t_final_score
    FROM %[1]s.task_attempts
    WHERE cell_id IN (%[3]s)
    GROUP BY cell_id, task_id
)
GROUP BY cell_id`

// RecomputeCellScores recomputes the cell_scores summaries (0003_cell_scores.sql)
// of cellIDs in database from their attempts in task_attempts. Call it after
// inserting attempts of those cells, before acknowledging them: the summary
// is then what v_cell_scores would compute live. It is idempotent (a re-run
// writes the same figures with a newer _version) and reads only the listed
// cells' rows (task_attempts is ordered by cell_id). A cell without attempts
// gets no row. Duplicate and empty ids are ignored.
func RecomputeCellScores(ctx context.Context, s Session, database string, cellIDs []string) error {
	if strings.TrimSpace(database) == "" {
		return ErrNoDatabase
	}
	ids := uniqueSorted(cellIDs)
	q := QuoteIdent(database)
	for i := 0; i < len(ids); i += RecomputeChunk {
		chunk := ids[i:min(i+RecomputeChunk, len(ids))]
		lits := make([]string, len(chunk))
		for j, id := range chunk {
			lits[j] = QuoteString(id)
		}
		// The version is taken before the statement reads: a recomputation
		// that started later (and so saw at least as many rows) wins.
		stmt := fmt.Sprintf(recomputeSQL, q, time.Now().UnixNano(), strings.Join(lits, ", "))
		if err := s.Exec(ctx, stmt); err != nil {
			return &RecomputeError{Cells: len(chunk), Err: err}
		}
	}
	return nil
}

// QuoteString returns s as a ClickHouse single-quoted string literal.
func QuoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func uniqueSorted(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	w := 0
	for i, s := range out {
		if i == 0 || s != out[w-1] {
			out[w] = s
			w++
		}
	}
	return out[:w]
}
