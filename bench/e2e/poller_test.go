package e2e

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/harnessflow/harnessflow/internal/chx"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/testenv"
)

// The poller counts a phase's rows in the real tables with count() until
// each reaches its expected rows; verify then checks distinct event ids in
// every table: exact and unchanged is verified, exact after rows arrived is
// verifiedLate (unless the table was polled by distinct ids), duplicates standing in for missing rows is short (and the
// table is polled by distinct ids from then on), more than expected (or any
// row in a table expected empty) is errTooMany. Rows of other phases do not
// count. The dead letters are counted last.
func TestPollerCountsThenVerifiesDistinctRows(t *testing.T) {
	ch := testenv.ClickHouse(t)
	ctx := context.Background()
	if _, err := chddl.Migrate(ctx, chx.Session(ch.Conn), ch.Database); err != nil {
		t.Fatal(err)
	}
	insert := func(table, cols string, rows ...[]any) {
		t.Helper()
		b, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+cols+")")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if err := b.Append(r...); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatalf("insert into %s: %v", table, err)
		}
	}
	attempts := func(prefix string, ids ...string) {
		t.Helper()
		rows := make([][]any, len(ids))
		for i, id := range ids {
			rows[i] = []any{id, prefix + "c1"}
		}
		insert("task_attempts", "event_id, cell_id", rows...)
	}
	poll := func(pl *poller) {
		t.Helper()
		if err := pl.poll(ctx); err != nil {
			t.Fatalf("poll: %v", err)
		}
	}
	verify := func(pl *poller, want verification, wantRawLate bool) {
		t.Helper()
		got, rawLate, err := pl.verify(ctx)
		if err != nil || got != want || rawLate != wantRawLate {
			t.Fatalf("verify = %v, raw late %v, %v; want %v, raw late %v", got, rawLate, err, want, wantRawLate)
		}
	}

	// 1. Complete, no duplicate: verified, and a row of another phase is
	// not counted.
	want := Counts{Attempts: 3, Samples: 1}
	pl := newPoller(ch.Conn, "r1-a-", want)
	poll(pl)
	if pl.rawReached() || pl.allReached() || pl.counts() != (Counts{}) {
		t.Fatalf("empty tables: raw %v, all %v, counts %+v", pl.rawReached(), pl.allReached(), pl.counts())
	}
	attempts("r1-a-", "a1", "a2", "a3")
	attempts("r1-b-", "b1")
	poll(pl)
	if !pl.rawReached() || pl.allReached() || pl.counts().Attempts != 3 {
		t.Fatalf("3 attempts, no sample: raw %v, all %v, counts %+v", pl.rawReached(), pl.allReached(), pl.counts())
	}
	insert("labeled_samples", "event_id, campaign_id", []any{"s1", "r1-a-camp"})
	poll(pl)
	if !pl.allReached() {
		t.Fatalf("every row in, not reached: counts %+v", pl.counts())
	}
	verify(pl, verified, false)
	if pl.counts() != want {
		t.Fatalf("verified counts %+v, want %+v", pl.counts(), want)
	}

	// 2. A redelivered row stands in for a missing one: short, then polled
	// by distinct ids until the missing row arrives, which verifies late
	// if a duplicate arrives after that poll.
	pl = newPoller(ch.Conn, "r2-a-", Counts{Attempts: 3})
	attempts("r2-a-", "a1", "a2", "a1")
	poll(pl)
	if !pl.allReached() {
		t.Fatal("count() of 3 rows did not reach 3")
	}
	verify(pl, short, false)
	if pl.allReached() || pl.counts().Attempts != 2 {
		t.Fatalf("after short: reached %v, attempts %d, want not reached at 2", pl.allReached(), pl.counts().Attempts)
	}
	poll(pl)
	if pl.allReached() {
		t.Fatal("polled by distinct ids, 2 of 3 counted as reached")
	}
	attempts("r2-a-", "a3")
	poll(pl)
	if !pl.allReached() {
		t.Fatal("3 distinct attempts not reached")
	}
	// Polled by distinct ids, a later duplicate changes nothing.
	attempts("r2-a-", "a2")
	verify(pl, verified, false)

	// 2b. Counted complete, then a row arrives before the check: whether the
	// rows were complete at the poll is unknown, so they count as complete
	// when the check began.
	pl = newPoller(ch.Conn, "r5-a-", Counts{Attempts: 2})
	attempts("r5-a-", "a1", "a2")
	poll(pl)
	attempts("r5-a-", "a1")
	verify(pl, verifiedLate, true)
	if pl.counts().Attempts != 2 {
		t.Fatalf("verified late: attempts %d, want 2", pl.counts().Attempts)
	}

	// 2c. A table counted complete with a duplicate stays verified when
	// another table came up short and the check runs again; a derived
	// table's late row does not make the raw rows late.
	pl = newPoller(ch.Conn, "r6-a-", Counts{Attempts: 2, Samples: 2})
	attempts("r6-a-", "a1", "a2", "a1")
	insert("labeled_samples", "event_id, campaign_id", []any{"s1", "r6-a-camp"}, []any{"s1", "r6-a-camp"})
	poll(pl)
	verify(pl, short, false)
	insert("labeled_samples", "event_id, campaign_id", []any{"s2", "r6-a-camp"})
	poll(pl)
	if !pl.allReached() {
		t.Fatalf("second sample in, not reached: %+v", pl.counts())
	}
	verify(pl, verified, false)
	pl = newPoller(ch.Conn, "r7-a-", Counts{Attempts: 1, Samples: 1})
	attempts("r7-a-", "a1")
	insert("labeled_samples", "event_id, campaign_id", []any{"s1", "r7-a-camp"})
	poll(pl)
	insert("labeled_samples", "event_id, campaign_id", []any{"s1", "r7-a-camp"})
	verify(pl, verifiedLate, false)

	// 3. More distinct rows than expected, and a dead letter in a phase
	// expected to have none.
	pl = newPoller(ch.Conn, "r3-a-", Counts{Attempts: 1})
	attempts("r3-a-", "a1", "a2")
	poll(pl)
	if _, _, err := pl.verify(ctx); !errors.Is(err, errTooMany) {
		t.Fatalf("2 distinct attempts, 1 expected: verify = %v, want errTooMany", err)
	}
	dead := func(id, source string) []any {
		return []any{id, source, "hf.attempts", int32(0), int64(7), "x r4-a-mal-0"}
	}
	// Two processor rows and the sink's own for one bad message.
	insert("rejected_events", "event_id, source, source_topic, source_partition, source_offset, payload",
		dead("d1", "processors"), dead("d2", "processors"), dead("d3", "sink"))
	pl = newPoller(ch.Conn, "r4-a-", Counts{})
	poll(pl)
	if _, _, err := pl.verify(ctx); !errors.Is(err, errTooMany) {
		t.Fatalf("a dead letter in a phase expecting none: verify = %v, want errTooMany", err)
	}
	pl = newPoller(ch.Conn, "r4-a-", Counts{DLQ: 1})
	poll(pl)
	if !pl.allReached() {
		t.Fatalf("one bad message: not reached, dlq %d", pl.counts().DLQ)
	}
	verify(pl, verified, false)

	// 4. The dead letters are counted only once every other table has its
	// rows, and then in the same poll: a bad message already in
	// rejected_events is not counted while an attempt is missing, and the
	// poll that sees the attempt arrive reaches both.
	insert("rejected_events", "event_id, source, source_topic, source_partition, source_offset, payload",
		[]any{"d8", "processors", "hf.attempts", int32(0), int64(8), "x r8-a-mal-0"})
	pl = newPoller(ch.Conn, "r8-a-", Counts{Attempts: 1, DLQ: 1})
	poll(pl)
	if pl.allReached() || pl.counts().DLQ != 0 {
		t.Fatalf("attempt missing: reached %v, dlq %d, want the dead letters not counted yet", pl.allReached(), pl.counts().DLQ)
	}
	var ph Phase
	pl.noteReached(&ph, 1)
	attempts("r8-a-", "a1")
	poll(pl)
	if !pl.allReached() || pl.counts().DLQ != 1 {
		t.Fatalf("attempt in: reached %v, dlq %d, want both reached in this poll", pl.allReached(), pl.counts().DLQ)
	}
	// Each table's reach time is the poll's that saw it; tables expected
	// empty are left out.
	pl.noteReached(&ph, 2)
	if want := map[string]float64{"task_attempts": 2, "rejected_events": 2}; !maps.Equal(ph.ReachedS, want) {
		t.Fatalf("reached %v, want %v", ph.ReachedS, want)
	}
	verify(pl, verified, false)
}
