package chaos

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/harnessflow/harnessflow/infra/chddl"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// TableCheck is one table's figures after the campaign. Ids are event ids
// (raw tables, round_metrics), sample ids (labeled_samples, trainer_steps)
// or malformed payloads (rejected_events: the dead letters of hf.dlq).
type TableCheck struct {
	// Table is the ClickHouse table.
	Table string `json:"table"`
	// Expected is the number of ids the table must hold.
	Expected int `json:"expected"`
	// Rows is the number of distinct ids visible with FINAL.
	Rows int `json:"rows"`
	// Lost is the number of expected ids missing from the table.
	Lost int `json:"lost"`
	// Duplicated is the number of ids visible more than once with FINAL
	// (trainer_steps: sample ids in more than one step).
	Duplicated int `json:"duplicated"`
	// Unexpected is the number of visible ids nobody produced.
	Unexpected int `json:"unexpected"`
	// LostExamples name up to 5 lost ids (sorted), for the bug report.
	LostExamples []string `json:"lost_examples,omitempty"`
}

// verification is what the ClickHouse checks found.
type verification struct {
	Tables []TableCheck
	// SampleMismatches are samples whose label, effect or p-value differ
	// from the reference (at most 10 described).
	SampleMismatches int
	MismatchExamples []string
	// DLQReasons counts the hf.dlq dead letters by reason code.
	DLQReasons map[string]int
	// DLQWrongReason counts malformed events dead-lettered with another
	// reason code than the expected one.
	DLQWrongReason int
	// DLQLogCopies counts malformed payloads with more than one dead letter:
	// a producer retry wrote the same bytes twice to the raw log (no event
	// id to deduplicate on), not a pipeline duplicate.
	DLQLogCopies int
	// SinkDecodeRows counts the sink's own decode rejections (a second
	// record of each malformed message read from a raw topic);
	// SinkDecodeUnexpected those whose payload is no malformed event.
	SinkDecodeRows, SinkDecodeUnexpected int
	// PendingMutations are unfinished ALTER ... DELETEs (the trainer's).
	PendingMutations int
}

// table returns the check of name.
func (v *verification) table(name string) *TableCheck {
	for i := range v.Tables {
		if v.Tables[i].Table == name {
			return &v.Tables[i]
		}
	}
	return &TableCheck{Table: name}
}

// failures lists every failed assertion.
func (v *verification) failures() []string {
	var out []string
	for _, t := range v.Tables {
		if t.Lost > 0 {
			out = append(out, fmt.Sprintf("%s: %d of %d expected ids lost (%s)", t.Table, t.Lost, t.Expected, strings.Join(t.LostExamples, ", ")))
		}
		if t.Duplicated > 0 {
			out = append(out, fmt.Sprintf("%s: %d ids duplicated", t.Table, t.Duplicated))
		}
		if t.Unexpected > 0 {
			out = append(out, fmt.Sprintf("%s: %d unexpected ids", t.Table, t.Unexpected))
		}
	}
	if v.SampleMismatches > 0 {
		out = append(out, fmt.Sprintf("labeled_samples: %d samples differ from the uninterrupted run (%s)", v.SampleMismatches, strings.Join(v.MismatchExamples, "; ")))
	}
	if v.DLQWrongReason > 0 {
		out = append(out, fmt.Sprintf("rejected_events: %d malformed events dead-lettered with the wrong reason code", v.DLQWrongReason))
	}
	if v.SinkDecodeUnexpected > 0 {
		out = append(out, fmt.Sprintf("rejected_events: the sink could not decode %d messages that were no malformed event", v.SinkDecodeUnexpected))
	}
	if v.PendingMutations > 0 {
		out = append(out, fmt.Sprintf("system.mutations: %d mutations not done", v.PendingMutations))
	}
	return out
}

// rawTables maps each raw topic to its table.
var rawTables = []struct{ topic, table string }{
	{schemas.TopicCampaigns, "campaigns"},
	{schemas.TopicCells, "cells"},
	{schemas.TopicAttempts, "task_attempts"},
	{schemas.TopicSkillEvents, "skill_events"},
	{schemas.TopicUpdates, "harness_updates"},
	{schemas.TopicJudgments, "adherence_judgments"},
}

// expectation is what ClickHouse must hold after the campaign.
type expectation struct {
	raw       map[string]map[string]bool // table -> event ids
	ref       *reference
	malformed map[string]string // payload -> reason code
}

func newExpectation(c *gen.Campaign, bad []malformed, ref *reference) *expectation {
	e := &expectation{raw: map[string]map[string]bool{}, ref: ref, malformed: map[string]string{}}
	table := map[string]string{}
	for _, rt := range rawTables {
		table[rt.topic] = rt.table
		e.raw[rt.table] = map[string]bool{}
	}
	for _, r := range c.Records {
		e.raw[table[r.Topic]][r.Event.Header().EventID] = true
	}
	for _, m := range bad {
		e.malformed[string(m.Msg.Value)] = m.Reason
	}
	return e
}

// verify queries ClickHouse (db) and compares it with e.
func verify(ctx context.Context, conn driver.Conn, db string, e *expectation) (*verification, error) {
	q := chddl.QuoteIdent(db)
	v := &verification{DLQReasons: map[string]int{}}
	for _, rt := range rawTables {
		got, err := idCounts(ctx, conn, fmt.Sprintf("SELECT event_id, count() FROM %s.%s FINAL GROUP BY event_id", q, rt.table))
		if err != nil {
			return nil, err
		}
		v.Tables = append(v.Tables, compare(rt.table, e.raw[rt.table], got))
	}

	// labeled_samples: ids and values against the reference.
	sc, wantSamples, err := verifySamples(ctx, conn, q, e, v)
	if err != nil {
		return nil, err
	}
	v.Tables = append(v.Tables, sc)

	rounds, err := idCounts(ctx, conn, fmt.Sprintf("SELECT event_id, count() FROM %s.round_metrics FINAL GROUP BY event_id", q))
	if err != nil {
		return nil, err
	}
	v.Tables = append(v.Tables, compare("round_metrics", e.ref.Rounds, rounds))

	// rejected_events: hf.dlq's dead letters, by payload.
	rc, err := verifyDLQ(ctx, conn, q, e, v)
	if err != nil {
		return nil, err
	}
	v.Tables = append(v.Tables, rc)

	trained, err := idCounts(ctx, conn, fmt.Sprintf("SELECT id, count() FROM (SELECT arrayJoin(sample_ids) AS id FROM %s.trainer_steps FINAL) GROUP BY id", q))
	if err != nil {
		return nil, err
	}
	v.Tables = append(v.Tables, withUpdates(compare("trainer_steps", wantSamples, trained), e.ref))

	var pending uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND is_done = 0", db).Scan(&pending); err != nil {
		return nil, fmt.Errorf("query system.mutations: %w", err)
	}
	v.PendingMutations = int(pending)
	return v, nil
}

// verifySamples compares labeled_samples in q (the quoted database) with
// the reference run, ids and values: it counts value mismatches in v and
// returns the table's check and the sample ids expected.
func verifySamples(ctx context.Context, conn driver.Conn, q string, e *expectation, v *verification) (TableCheck, map[string]bool, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT sample_id, count(), any(label), any(effect), any(p_value) FROM %s.labeled_samples FINAL GROUP BY sample_id", q))
	if err != nil {
		return TableCheck{}, nil, fmt.Errorf("query labeled_samples: %w", err)
	}
	got := map[string]uint64{}
	for rows.Next() {
		var id, label string
		var n uint64
		var effect, p float64
		if err := rows.Scan(&id, &n, &label, &effect, &p); err != nil {
			rows.Close()
			return TableCheck{}, nil, fmt.Errorf("scan labeled_samples: %w", err)
		}
		got[id] = n
		want, ok := e.ref.Samples[id]
		if ok && (label != want.Label || !near(effect, want.Effect) || !near(p, want.PValue)) {
			v.SampleMismatches++
			if len(v.MismatchExamples) < 10 {
				v.MismatchExamples = append(v.MismatchExamples, fmt.Sprintf("%s: %s/%.6g/%.6g, reference %s/%.6g/%.6g", id, label, effect, p, want.Label, want.Effect, want.PValue))
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return TableCheck{}, nil, fmt.Errorf("read labeled_samples: %w", err)
	}
	wantSamples := map[string]bool{}
	for id := range e.ref.Samples {
		wantSamples[id] = true
	}
	return withUpdates(compare("labeled_samples", wantSamples, got), e.ref), wantSamples, nil
}

// verifyDLQ checks rejected_events in q (the quoted database) against the
// malformed events, by payload: hf.dlq's dead letters as the table's check
// (returned), their reasons and copies, and the sink's own decode-failure
// rows, in v.
func verifyDLQ(ctx context.Context, conn driver.Conn, q string, e *expectation, v *verification) (TableCheck, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT event_id, _topic, reason_code, payload FROM %s.rejected_events FINAL", q))
	if err != nil {
		return TableCheck{}, fmt.Errorf("query rejected_events: %w", err)
	}
	dlq := map[string]uint64{}
	byID := map[string]int{}
	for rows.Next() {
		var id, topic, reason, payload string
		if err := rows.Scan(&id, &topic, &reason, &payload); err != nil {
			rows.Close()
			return TableCheck{}, fmt.Errorf("scan rejected_events: %w", err)
		}
		byID[id]++
		want, isBad := e.malformed[payload]
		if topic != schemas.TopicDLQ {
			v.SinkDecodeRows++
			if !isBad {
				v.SinkDecodeUnexpected++
			}
			continue
		}
		dlq[payload]++
		v.DLQReasons[reason]++
		if isBad && reason != want {
			v.DLQWrongReason++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return TableCheck{}, fmt.Errorf("read rejected_events: %w", err)
	}
	wantDLQ := map[string]bool{}
	for p := range e.malformed {
		wantDLQ[p] = true
	}
	rc := compare("rejected_events", wantDLQ, nil)
	rc.Rows = len(dlq)
	rc.Lost, rc.Unexpected = 0, 0
	rc.LostExamples = nil
	for p := range wantDLQ {
		if dlq[p] == 0 {
			rc.Lost++
		}
	}
	for p, n := range dlq {
		if !wantDLQ[p] {
			rc.Unexpected++
		}
		if n > 1 {
			v.DLQLogCopies++
		}
	}
	for _, n := range byID {
		if n > 1 {
			rc.Duplicated++
		}
	}
	return rc, nil
}

// compare counts want's ids missing from got, got's ids seen more than once
// and got's ids not in want.
func compare(table string, want map[string]bool, got map[string]uint64) TableCheck {
	tc := TableCheck{Table: table, Expected: len(want), Rows: len(got)}
	for _, id := range sortedKeys(want) {
		if got[id] == 0 {
			tc.Lost++
			if len(tc.LostExamples) < 5 {
				tc.LostExamples = append(tc.LostExamples, id)
			}
		}
	}
	for id, n := range got {
		if n > 1 {
			tc.Duplicated++
		}
		if !want[id] {
			tc.Unexpected++
		}
	}
	return tc
}

// withUpdates names each lost sample's update.
func withUpdates(tc TableCheck, ref *reference) TableCheck {
	for i, id := range tc.LostExamples {
		tc.LostExamples[i] = id + " (update " + ref.SampleUpdates[id] + ")"
	}
	return tc
}

// idCounts runs a query returning (id String, n UInt64) rows.
func idCounts(ctx context.Context, conn driver.Conn, query string) (map[string]uint64, error) {
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", query, err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var id string
		var n uint64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("%s: %w", query, err)
		}
		out[id] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", query, err)
	}
	return out, nil
}

// near compares two doubles written and read back exactly, allowing for a
// last-bit difference; NaNs compare equal.
func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
