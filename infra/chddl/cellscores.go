package chddl

import (
	"context"
	"fmt"
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
// list of (project, cell_id) tuples, written twice) from their attempts:
// the cell_rates_nk fragment keyed by project and cell id, the definition
// v_cell_scores computes live (0009_natural_keys.sql: one winner per
// natural key, attempts refused as late_beyond_window left out),
// restricted to those cells. Its subqueries are GLOBAL (ClusterSQL): on a
// cluster rejected_events is sharded apart from the cells' attempts, and
// on a single server GLOBAL changes nothing.
//
// The version of a summary is NaturalKeyBase plus the number of distinct
// attempt events it was computed from plus the number of those refused as
// late (distinct 64-bit hashes of their event ids: exact unless two of a
// cell's ids collide, a chance of about 3 in 10^12 for a cell of 10 000
// events; cheaper than a set of the strings): a recomputation that saw more
// of the cell's attempts, or more of their refusals, wins, whichever sink
// or host ran it and whatever its clock said. Both only accumulate (a
// redelivery has the event id of the row it repeats), so once every
// attempt and every refusal has been seen by a recomputation, that
// recomputation's figures win.
var recomputeSQL = recomputeStatement("(project, cell_id) IN ({cells})")

// recomputeAllSQL recomputes every cell's summary: Migrate runs it after
// 0009 (backfill).
var recomputeAllSQL = recomputeStatement("")

// recomputeStatement is the recomputation of the cells cond selects (every
// cell when cond is empty).
func recomputeStatement(cond string) string {
	rates, err := fragmentWhere("cell_rates_nk", "project, cell_id", cond)
	if err != nil {
		panic(err) // embedded; TestRecompute* cover it
	}
	where := ""
	if cond != "" {
		where = "\n    WHERE " + cond
	}
	return clusterSQL(`INSERT INTO {db}.cell_scores (project, cell_id, n_tasks, pass_rate, pass_rate_final, mean_score, mean_score_final, _version, _computed_at)
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
` + strings.Replace(versionSQL, "{cellwhere}", where, 1) + `
) AS r1 USING (project, cell_id)`)
}

// versionSQL is, per listed cell ({cells}), the version its summary must
// have (c_version): NaturalKeyBase + distinct attempt events + those of
// them refused as late_beyond_window.
var versionSQL = `    SELECT project, cell_id,
        toUInt64(` + strconv.FormatUint(NaturalKeyBase, 10) + ` + ` + attemptsSQL + ` + ` + refusedSQL + `) AS c_version
    FROM {db}.task_attempts{cellwhere}
    GROUP BY project, cell_id`

// attemptsSQL and refusedSQL are the two counts of a summary's version,
// aggregated over a cell's task_attempts rows: its distinct attempt events
// and those of them refused as late_beyond_window.
const (
	attemptsSQL = `uniqExact(cityHash64(event_id))`
	refusedSQL  = `uniqExactIf(cityHash64(event_id), (project, event_id) IN
            (SELECT project, source_event_id FROM {db}.rejected_events WHERE reason_code = 'late_beyond_window'))`
)

// summariesBehindSQL counts the cells of a campaign ({campaign}, a quoted
// literal) whose newest summary is older than their attempts: per cell,
// a (distinct attempt events) + r (those refused as late_beyond_window) is
// the version versionSQL gives a recomputation now, less NaturalKeyBase,
// and h the newest summary's, less the same base (0: none). Versions only
// grow with what a recomputation saw, so the cell is behind while
// a + r > h. A cell all of whose attempts are refused (a = r) is not: a
// recomputation writes no row for it (its rates have no task), so it would
// never catch up; that happens when a campaign is sent again after its
// cells' --grace, and its figures then stay those of the summary before.
// Both sides are aggregated per cell in one UNION ALL and grouped once
// more, instead of joined; cells are the campaign's by (project, cell_id);
// in cluster form (GLOBAL IN).
var summariesBehindSQL = clusterSQL(`SELECT toUInt64(countIf(a + r > h AND a > r)) FROM (
    SELECT project, cell_id, sum(a) AS a, sum(r) AS r, sum(h) AS h FROM (
        SELECT project, cell_id, toUInt64(` + attemptsSQL + `) AS a, toUInt64(` + refusedSQL + `) AS r, toUInt64(0) AS h
        FROM {db}.task_attempts
        WHERE (project, cell_id) IN (SELECT project, cell_id FROM {db}.cells FINAL WHERE kind = 'started' AND campaign_id = {campaign})
        GROUP BY project, cell_id
        UNION ALL
        SELECT project, cell_id, toUInt64(0) AS a, toUInt64(0) AS r, toUInt64(max(_version) - ` + strconv.FormatUint(NaturalKeyBase, 10) + `) AS h
        FROM {db}.cell_scores
        WHERE _version >= ` + strconv.FormatUint(NaturalKeyBase, 10) + ` AND (project, cell_id) IN (SELECT project, cell_id FROM {db}.cells FINAL WHERE kind = 'started' AND campaign_id = {campaign})
        GROUP BY project, cell_id
    )
    GROUP BY project, cell_id
)`)

// SummariesBehindSQL is SummariesBehind's query, for a client that runs it
// itself (clickhouse-client): one row, one UInt64.
func SummariesBehindSQL(database, campaign string) string {
	return strings.NewReplacer(DBPlaceholder, QuoteIdent(database), "{campaign}", QuoteString(campaign)).Replace(summariesBehindSQL)
}

// SummariesBehind is the number of campaign's cells whose cell_scores
// summary does not cover every attempt (and every late refusal) database
// holds now: a cell with a summary is read from it by v_cell_scores, so
// its figures are from before those attempts (a cell without any summary
// counts too, although the view computes it live). A sink recomputes a
// cell's summary after inserting its attempts, at most once per its
// --recompute-every: for that moment after the last attempts land, a
// reader that counts rows only would read the summary before them. Whoever
// must read a campaign's final figures (the demo's report) waits for 0. A
// cell stays behind for good only when a recomputation cannot see what is
// stored (a cluster's replica that lost rows the sink no longer verifies).
// It holds on a single server and on a cluster's Distributed tables.
func SummariesBehind(ctx context.Context, s Session, database, campaign string) (int, error) {
	if strings.TrimSpace(database) == "" {
		return 0, ErrNoDatabase
	}
	_, rows, err := s.QueryStrings(ctx, SummariesBehindSQL(database, campaign))
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return 0, fmt.Errorf("chddl: summaries behind: %d rows, want one value", len(rows))
	}
	n, err := strconv.Atoi(rows[0][0])
	if err != nil {
		return 0, fmt.Errorf("chddl: summaries behind: %w", err)
	}
	return n, nil
}

// VersionBase is added to the count of events a cell_scores summary was
// computed from to make its _version (2^62) by releases before the natural
// keys (0009): above the wall-clock versions (unix nanoseconds, about
// 1.8e18) that earlier releases wrote, so that their summaries lose to the
// first recomputation after an upgrade.
const VersionBase uint64 = 1 << 62

// NaturalKeyBase is the base of the versions of summaries computed under
// the natural-key rules (0009_natural_keys.sql; 3 << 61): v_cell_scores
// reads only summaries at or above it (the view's text holds the number),
// so a summary an earlier release computed under other rules is ignored
// and the cell is computed live until the sink recomputes it.
const NaturalKeyBase uint64 = 3 << 61

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
// lands on a replica whole), or the ids of its attempts refused as
// late_beyond_window whose dead letters were last inserted.
type CellCheck struct {
	Key      CellKey
	EventIDs []string
	// RefusedIDs are attempt event ids whose late_beyond_window dead letters
	// the summary must have seen: until rejected_events, as read, holds
	// them all, the cell is not settled (its recomputation may have read a
	// replica without them and counted the refused attempts).
	RefusedIDs []string
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
	refused := map[CellKey]map[string]struct{}{}
	var keys []CellKey
	for _, c := range checks {
		if c.Key.CellID == "" {
			continue
		}
		for _, id := range c.RefusedIDs {
			if refused[c.Key] == nil {
				refused[c.Key] = map[string]struct{}{}
			}
			refused[c.Key][id] = struct{}{}
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
	return refusalsUnseen(ctx, s, q, refused, unsettled)
}

// refusalsUnseen adds to unsettled the cells of refused (cell -> refused
// attempt ids) whose late_beyond_window dead letters rejected_events, as
// read, does not all hold.
func refusalsUnseen(ctx context.Context, s Session, q string, refused map[CellKey]map[string]struct{}, unsettled []CellKey) ([]CellKey, error) {
	if len(refused) == 0 {
		return unsettled, nil
	}
	done := map[CellKey]bool{}
	for _, k := range unsettled {
		done[k] = true
	}
	byID := map[[2]string][]CellKey{} // (project, id) -> cells
	var lits []string
	for k, ids := range refused {
		for id := range ids {
			pid := [2]string{k.Project, id}
			if byID[pid] == nil {
				lits = append(lits, "("+QuoteString(k.Project)+", "+QuoteString(id)+")")
			}
			byID[pid] = append(byID[pid], k)
		}
	}
	sort.Strings(lits)
	const head = "SELECT project, source_event_id FROM %s.rejected_events WHERE reason_code = 'late_beyond_window' AND (project, source_event_id) IN (%s)"
	seen := map[[2]string]bool{}
	for _, chunk := range recomputeChunks(lits, len(head)+len(q), 1) {
		_, rows, err := s.QueryStrings(ctx, fmt.Sprintf(head, q, strings.Join(chunk, ", ")))
		if err != nil {
			return nil, &RecomputeError{Cells: len(chunk), Err: err}
		}
		for _, r := range rows {
			if len(r) == 2 {
				seen[[2]string{r[0], r[1]}] = true
			}
		}
	}
	var add []CellKey
	for pid, cells := range byID {
		if seen[pid] {
			continue
		}
		for _, k := range cells {
			if !done[k] {
				done[k] = true
				add = append(add, k)
			}
		}
	}
	sort.Slice(add, func(i, j int) bool {
		if add[i].Project != add[j].Project {
			return add[i].Project < add[j].Project
		}
		return add[i].CellID < add[j].CellID
	})
	return append(unsettled, add...), nil
}

// verifySQL reads, per listed cell ({cells}), the version its summary must
// have (versionSQL), how many of the listed event ids ({ids}, (project,
// cell_id, event_id) tuples) were read, and the version of its newest
// summary (0 when it has none).
var verifySQL = clusterSQL(`SELECT project, cell_id, toString(want), toString(seen), toString(have)
FROM
(
    SELECT project, cell_id, c_version AS want, seen
    FROM
    (
        SELECT project, cell_id, uniqExactIf(event_id, (project, cell_id, event_id) IN ({ids})) AS seen
        FROM {db}.task_attempts
        WHERE (project, cell_id) IN ({cells})
        GROUP BY project, cell_id
    ) AS a0
    ALL INNER JOIN
    (
` + strings.Replace(versionSQL, "{cellwhere}", "\n    WHERE (project, cell_id) IN ({cells})", 1) + `
    ) AS b0 USING (project, cell_id)
) AS a
ALL LEFT JOIN
(
    SELECT project, cell_id, max(_version) AS have
    FROM {db}.cell_scores
    WHERE (project, cell_id) IN ({cells})
    GROUP BY project, cell_id
) AS b USING (project, cell_id)`)

// backfill runs, after migration version's statements and before its
// ledger record, what it does to the data: 0009 recomputes every cell's
// cell_scores summary under its rules (summaries of earlier releases are
// ignored by its v_cell_scores, which would otherwise compute every cell
// that gets no new attempt live: the same figures, slowly). It reads every
// attempt once (about 14 s for 10M attempts on 2 cores); a re-run writes
// the same summaries again. On a cluster it runs once, through the node
// asked, into the Distributed table.
func backfill(ctx context.Context, s Session, database string, version uint32) error {
	if version != 9 {
		return nil
	}
	if err := s.Exec(ctx, strings.ReplaceAll(recomputeAllSQL, DBPlaceholder, QuoteIdent(database))); err != nil {
		return fmt.Errorf("recompute every cell_scores summary: %w", err)
	}
	return nil
}
