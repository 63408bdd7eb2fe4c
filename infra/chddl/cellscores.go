package chddl

import (
	"context"
	"sort"
	"strconv"
	"strings"
)

// RecomputeChunk is the most cells one RecomputeCellScores statement covers.
const RecomputeChunk = 500

// MaxStatementBytes bounds the length of every statement built from data
// (RecomputeCellScores): half of ClickHouse's default max_query_size
// (262144 bytes), which the server refuses past as a syntax error ("Max
// query size exceeded", permanent: a sink would stop on it at every start).
const MaxStatementBytes = 128 << 10

// recomputeSQL writes the cell_scores rows of the listed cells ({cells}, a
// list of (project, cell_id) tuples, written twice) from their deduplicated
// attempts: the cell_rates fragment keyed by project and cell id, the same
// definition v_cell_scores computes live, restricted to those cells.
//
// The version of a summary is VersionBase plus the number of distinct
// attempt events it was computed from (distinct 64-bit hashes of their
// event ids: exact unless two of a cell's ids collide, a chance of about
// 3 in 10^12 for a cell of 10 000 events; cheaper than a set of the
// strings): a recomputation that saw more of the cell's attempts wins,
// whichever sink or host ran it and whatever its clock said. Attempts only
// accumulate (a redelivery has the event id of the row it repeats), so two
// recomputations that saw as many events saw the same ones and wrote the
// same figures.
var recomputeSQL = func() string {
	rates, err := fragmentWhere("cell_rates", "project, cell_id", "(project, cell_id) IN ({cells})")
	if err != nil {
		panic(err) // embedded; TestRecompute* cover it
	}
	return `INSERT INTO {db}.cell_scores (project, cell_id, n_tasks, pass_rate, pass_rate_final, mean_score, mean_score_final, _version, _computed_at)
SELECT
    project,
    cell_id,
    r_n_tasks,
    r_pass_rate,
    r_pass_rate_final,
    r_mean_score,
    r_mean_score_final,
    c_version,
    now() AS c_computed_at
FROM
(
` + rates + `
) AS l1
ALL INNER JOIN
(
    SELECT project, cell_id, toUInt64(` + strconv.FormatUint(VersionBase, 10) + ` + uniqExact(cityHash64(event_id))) AS c_version
    FROM {db}.task_attempts
    WHERE (project, cell_id) IN ({cells})
    GROUP BY project, cell_id
) AS r1 USING (project, cell_id)`
}()

// VersionBase is added to the count of events a cell_scores summary was
// computed from to make its _version (2^62): above the wall-clock versions
// (unix nanoseconds, about 1.8e18) that earlier releases wrote, so that
// their summaries lose to the first recomputation after an upgrade.
const VersionBase uint64 = 1 << 62

// CellKey identifies a cell: two projects that use one cell id have two
// cells (0004_project_keys.sql).
type CellKey struct {
	Project, CellID string
}

// RecomputeCells recomputes the cell_scores summaries (0003_cell_scores.sql,
// keyed by project and cell id since 0004) of cells in database from their
// attempts in task_attempts. Call it after inserting attempts of those
// cells, before acknowledging them: the summary is then what v_cell_scores
// would compute live. It is idempotent (a re-run writes the same figures with
// a newer _version) and reads only the listed cells' rows (task_attempts is
// ordered by project, cell_id). A cell without attempts gets no row.
// Duplicates and keys with an empty cell id are ignored. The cells are split
// over statements of at most RecomputeChunk cells and MaxStatementBytes
// bytes; a key whose quoted tuple alone would not fit (over ~126 KiB: no
// valid event has one, schemas caps ids at 256 bytes) is skipped and its
// cell keeps its old summary.
func RecomputeCells(ctx context.Context, s Session, database string, cells []CellKey) error {
	if strings.TrimSpace(database) == "" {
		return ErrNoDatabase
	}
	q := QuoteIdent(database)
	// The list of cells appears twice in the statement.
	for _, lits := range recomputeChunks(uniqueTuples(cells), len(recomputeSQL)+2*len(q)+64, 2) {
		// One pass over the template: a cell id holding "{db}" stays as it is.
		stmt := strings.NewReplacer(DBPlaceholder, q, "{cells}", strings.Join(lits, ", ")).Replace(recomputeSQL)
		if err := s.Exec(ctx, stmt); err != nil {
			return &RecomputeError{Cells: len(lits), Err: err}
		}
	}
	return nil
}

// RecomputeCellScores recomputes, like RecomputeCells, the summaries of
// every cell whose id is in cellIDs, in every project that has one (each
// project's cell its own summary). Callers that know the projects use
// RecomputeCells.
func RecomputeCellScores(ctx context.Context, s Session, database string, cellIDs []string) error {
	if strings.TrimSpace(database) == "" {
		return ErrNoDatabase
	}
	ids := uniqueSorted(cellIDs)
	if len(ids) == 0 {
		return nil
	}
	var keys []CellKey
	for _, chunk := range recomputeChunks(quoteAll(ids), 256, 1) {
		_, rows, err := s.QueryStrings(ctx, "SELECT DISTINCT project, cell_id FROM "+QuoteIdent(database)+
			".task_attempts WHERE cell_id IN ("+strings.Join(chunk, ", ")+")")
		if err != nil {
			return &RecomputeError{Cells: len(chunk), Err: err}
		}
		for _, r := range rows {
			if len(r) == 2 {
				keys = append(keys, CellKey{Project: r[0], CellID: r[1]})
			}
		}
	}
	return RecomputeCells(ctx, s, database, keys)
}

func quoteAll(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = QuoteString(id)
	}
	return out
}

// uniqueTuples returns the distinct keys with a cell id, sorted, each as a
// quoted ('project', 'cell_id') tuple.
func uniqueTuples(cells []CellKey) []string {
	keys := make([]CellKey, 0, len(cells))
	for _, c := range cells {
		if c.CellID != "" {
			keys = append(keys, c)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Project != keys[j].Project {
			return keys[i].Project < keys[j].Project
		}
		return keys[i].CellID < keys[j].CellID
	})
	out := make([]string, 0, len(keys))
	for i, k := range keys {
		if i > 0 && k == keys[i-1] {
			continue
		}
		out = append(out, "("+QuoteString(k.Project)+", "+QuoteString(k.CellID)+")")
	}
	return out
}

// recomputeChunks groups literals so that each group, joined with ", "
// and written copies times into a template of fixed bytes, stays within
// MaxStatementBytes and RecomputeChunk; literals that fit in no group are
// dropped.
func recomputeChunks(lits []string, fixed, copies int) [][]string {
	var out [][]string
	var cur []string
	size := fixed
	for _, lit := range lits {
		if fixed+copies*len(lit) > MaxStatementBytes {
			continue
		}
		if len(cur) > 0 && (size+copies*(2+len(lit)) > MaxStatementBytes || len(cur) == RecomputeChunk) {
			out = append(out, cur)
			cur, size = nil, fixed
		}
		cur = append(cur, lit)
		size += copies * (2 + len(lit))
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
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

// CellCheck is what VerifyCells checks of one cell: its key and some event
// ids of the attempts last inserted for it (a few are enough: an insert
// lands on a replica whole).
type CellCheck struct {
	Key      CellKey
	EventIDs []string
}

// VerifyCells reports which of the checked cells' cell_scores summaries are
// not yet what their attempts give: the cell's attempts, as read, do not
// include every listed event id (the read went to a replica that has not
// fetched that insert yet, or the only replica that has it is down), or the
// summary's version is not VersionBase plus the number of distinct attempt
// events read (no summary, or one computed from fewer or other events).
//
// On a cluster a recomputation reads each shard through one of its replicas,
// which may not hold an insert another replica acknowledged a moment before:
// the summary it writes then lacks those attempts, or is not written at
// all, and nothing recomputes the cell again if no later attempt arrives.
// A sink that recomputes through a cluster calls VerifyCells a little later
// and recomputes the cells it returns until none is returned. Duplicated
// checks are merged; checks with an empty cell id are ignored; a cell whose
// key alone exceeds MaxStatementBytes is reported settled (RecomputeCells
// skips it as well).
func VerifyCells(ctx context.Context, s Session, database string, checks []CellCheck) ([]CellKey, error) {
	if strings.TrimSpace(database) == "" {
		return nil, ErrNoDatabase
	}
	want := map[CellKey]map[string]struct{}{}
	var keys []CellKey
	for _, c := range checks {
		if c.Key.CellID == "" {
			continue
		}
		ids, ok := want[c.Key]
		if !ok {
			ids = map[string]struct{}{}
			want[c.Key] = ids
			keys = append(keys, c.Key)
		}
		for _, id := range c.EventIDs {
			ids[id] = struct{}{}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Project != keys[j].Project {
			return keys[i].Project < keys[j].Project
		}
		return keys[i].CellID < keys[j].CellID
	})
	q := QuoteIdent(database)
	fixed := len(verifySQL) + 2*len(q) + 64
	var unsettled []CellKey
	for lo := 0; lo < len(keys); {
		// A chunk: its cells' tuples (written twice) and their id tuples.
		var cells, idLits []string
		included := map[CellKey]bool{}
		size := fixed
		hi := lo
		for ; hi < len(keys) && len(cells) < RecomputeChunk; hi++ {
			k := keys[hi]
			tuple := "(" + QuoteString(k.Project) + ", " + QuoteString(k.CellID) + ")"
			var lits []string
			cost := 2 * (2 + len(tuple))
			for id := range want[k] {
				lit := "(" + QuoteString(k.Project) + ", " + QuoteString(k.CellID) + ", " + QuoteString(id) + ")"
				lits = append(lits, lit)
				cost += 2 + len(lit)
			}
			if fixed+cost > MaxStatementBytes {
				if len(cells) == 0 {
					continue // fits no statement: settled, as RecomputeCells skips it
				}
				break
			}
			if size+cost > MaxStatementBytes {
				break
			}
			size += cost
			included[k] = true
			cells = append(cells, tuple)
			idLits = append(idLits, lits...)
		}
		chunk := keys[lo:hi]
		lo = hi
		if len(cells) == 0 {
			continue
		}
		ids := "('', '', '')" // no ids listed: any read counts as complete
		if len(idLits) > 0 {
			ids = strings.Join(idLits, ", ")
		}
		stmt := strings.NewReplacer(DBPlaceholder, q, "{cells}", strings.Join(cells, ", "), "{ids}", ids).Replace(verifySQL)
		_, rows, err := s.QueryStrings(ctx, stmt)
		if err != nil {
			return nil, &RecomputeError{Cells: len(cells), Err: err}
		}
		read := map[CellKey][]string{}
		for _, r := range rows {
			if len(r) == 5 {
				read[CellKey{Project: r[0], CellID: r[1]}] = r[2:]
			}
		}
		for _, k := range chunk {
			r, ok := read[k]
			if !included[k] {
				continue // skipped: fits no statement
			}
			if !ok || r[1] != strconv.Itoa(len(want[k])) || r[0] != r[2] {
				unsettled = append(unsettled, k)
			}
		}
	}
	return unsettled, nil
}

// verifySQL reads, per listed cell ({cells}), the version its summary must
// have (from the distinct attempt events read), how many of the listed
// event ids ({ids}, (project, cell_id, event_id) tuples) were read, and the
// version of its newest summary (0 when it has none).
var verifySQL = `SELECT project, cell_id, toString(want), toString(seen), toString(have)
FROM
(
    SELECT project, cell_id,
        toUInt64(` + strconv.FormatUint(VersionBase, 10) + ` + uniqExact(cityHash64(event_id))) AS want,
        uniqExactIf(event_id, (project, cell_id, event_id) IN ({ids})) AS seen
    FROM {db}.task_attempts
    WHERE (project, cell_id) IN ({cells})
    GROUP BY project, cell_id
) AS a
ALL LEFT JOIN
(
    SELECT project, cell_id, max(_version) AS have
    FROM {db}.cell_scores
    WHERE (project, cell_id) IN ({cells})
    GROUP BY project, cell_id
) AS b USING (project, cell_id)`
