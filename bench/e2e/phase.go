package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/stack"
)

// plan is the shape of one generated chunk.
type plan struct {
	cfg    gen.Config
	events int
}

// planFor sizes a campaign of at least n events (less than one agent's
// worth more): 3 evolvers per agent, 10 rounds of up to 100 tasks, as many
// agents as n needs, rounded up.
func planFor(n int) plan {
	c := gen.Config{Agents: 1, Evolvers: 3, Rounds: 10, TasksPerRound: 100}
	per := len(gen.Generate(c).Records) - 1
	if per > n {
		c.TasksPerRound = max(2, c.TasksPerRound*n/per)
		per = len(gen.Generate(c).Records) - 1
	}
	// per events an agent, plus the campaign's declaration.
	c.Agents = max(1, (n-1+per-1)/per)
	events := len(gen.Generate(c).Records)
	for events < n { // agents' event counts vary a little
		c.Agents++
		events = len(gen.Generate(c).Records)
	}
	return plan{cfg: c, events: events}
}

// chunk generates the k-th campaign of a phase.
func (b *bench) chunk(p plan, phase string, k int) *gen.Campaign {
	c := p.cfg
	c.Seed = int64(k + 1)
	c.Campaign = fmt.Sprintf("%s-%s-%02d", b.run, phase, k)
	c.Start = time.Now().UTC().Truncate(time.Millisecond)
	return gen.Generate(c)
}

func (b *bench) prefix(phase string) string { return b.run + "-" + phase + "-" }

// Counts are rows per table of one phase.
type Counts struct {
	Campaigns   int `json:"campaigns"`
	Cells       int `json:"cells"`
	Attempts    int `json:"task_attempts"`
	SkillEvents int `json:"skill_events"`
	Updates     int `json:"harness_updates"`
	Judgments   int `json:"adherence_judgments"`
	Samples     int `json:"labeled_samples"`
	Rounds      int `json:"round_metrics"`
	DLQ         int `json:"rejected_events"`
}

func (c Counts) raw() int {
	return c.Campaigns + c.Cells + c.Attempts + c.SkillEvents + c.Updates + c.Judgments
}

func (c *Counts) add(o Counts) {
	c.Campaigns += o.Campaigns
	c.Cells += o.Cells
	c.Attempts += o.Attempts
	c.SkillEvents += o.SkillEvents
	c.Updates += o.Updates
	c.Judgments += o.Judgments
	c.Samples += o.Samples
	c.Rounds += o.Rounds
	c.DLQ += o.DLQ
}

// expected counts the rows a processed campaign leaves (stack.CountDemo
// for the derived ones).
func expected(c *gen.Campaign) Counts {
	var n Counts
	evs := make([]schemas.Event, 0, len(c.Records))
	for _, r := range c.Records {
		evs = append(evs, r.Event)
		switch r.Event.(type) {
		case *schemas.CampaignDeclared:
			n.Campaigns++
		case *schemas.CellStarted, *schemas.CellFinished:
			n.Cells++
		case *schemas.TaskAttempt:
			n.Attempts++
		case *schemas.SkillEvent:
			n.SkillEvents++
		case *schemas.HarnessUpdate:
			n.Updates++
		case *schemas.AdherenceJudgment:
			n.Judgments++
		}
	}
	d := stack.CountDemo(evs)
	n.Samples, n.Rounds = d.Samples, d.Rounds
	return n
}

// phase produces chunks generated campaigns of p through the Go SDK, one
// after the other, and waits until ClickHouse holds every row. inject, when
// set, is called after each emitted event (the storm). rate > 0 paces the
// emits at rate events/s over the whole phase; 0 emits as fast as the SDK
// takes them.
func (b *bench) phase(ctx context.Context, name string, p plan, chunks int, inj *injector, rate int) (*Phase, error) {
	// The campaign is generated before the clock starts: it stands for the
	// agents' work, which runs on their own machines, not for the
	// pipeline's. (Generating it chunk by chunk during the run cost about
	// 2.4 us of the driver's CPU per event, 4 % of the pipeline's CPU on 2
	// cores; held whole it takes about 360 bytes per event.)
	type genned struct {
		c    *gen.Campaign
		want Counts
	}
	gens := make([]genned, 0, chunks)
	genStart := time.Now()
	for k := 0; k < chunks; k++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := b.chunk(p, name, k)
		gens = append(gens, genned{c, expected(c)})
	}
	if chunks > 1 {
		b.pr("  %s: %d chunks generated in %.1fs", name, chunks, time.Since(genStart).Seconds())
	}
	prod, err := producers.New(producers.Config{Brokers: b.cl.Brokers(), Source: "bench-e2e"})
	if err != nil {
		return nil, err
	}
	defer prod.Close(context.Background())
	ph := &Phase{Chunks: chunks, PacedPerS: float64(rate)}
	var t0 time.Time
	var cpu0 cpuSnap
	k, n := 0, 0
	for i := range gens {
		g := &gens[i]
		if t0.IsZero() {
			cpu0 = b.cpuSnap()
			t0 = time.Now()
		}
		for _, r := range g.c.Records {
			if rate > 0 {
				due := t0.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				n++
			}
			// event_time is stamped by the SDK at emit, as a live agent's would be:
			// the generator's synthetic times (1 ms apart from the chunk's start)
			// run ahead of the emit rate, so chunks emitted back to back would
			// overlap in event time, which no live producer does.
			r.Event.Header().EventTime = time.Time{}
			if err := prod.Emit(ctx, r.Event); err != nil {
				return nil, fmt.Errorf("emit %s: %w", r.Event.Header().EventID, err)
			}
			if inj != nil {
				inj.after(ctx, r)
			}
		}
		ph.Events += len(g.c.Records)
		ph.Expected.add(g.want)
		g.c = nil // emitted (the SDK encodes at Emit): let it go
		k++
		if chunks > 1 {
			b.pr("  %s: chunk %d/%d emitted (%d events, %.0f events/s so far)", name, k, chunks, ph.Events, float64(ph.Events)/time.Since(t0).Seconds())
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := prod.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	if inj != nil {
		if err := inj.close(ctx); err != nil {
			return nil, err
		}
		ph.Expected.DLQ = inj.sent
	}
	ph.ProduceS = time.Since(t0).Seconds()
	b.pr("  %s: %d events produced in %.1fs (%.0f events/s); waiting for ClickHouse", name, ph.Events, ph.ProduceS, float64(ph.Events)/ph.ProduceS)
	cpu1, err := b.wait(ctx, name, ph, t0, 500*time.Millisecond)
	if err != nil {
		return ph, err
	}
	ph.CPU = cpuBudget(cpu0, cpu1, ph.Events)
	b.pr("  %s: cpu: %s; %d visibility polls took %.2f s of queries", name, ph.CPU, ph.Polls, ph.PollQueryS)
	return ph, nil
}

// wait polls ClickHouse until ph.Expected rows of the phase are visible
// (counted, then checked exactly, see poller), and the processors' lag is
// 0. Times are measured from t0; it returns the CPU snapshot taken when the
// rows were visible.
func (b *bench) wait(ctx context.Context, name string, ph *Phase, t0 time.Time, every time.Duration) (cpuSnap, error) {
	ph.PollMS = float64(every.Milliseconds())
	deadline := time.Now().Add(b.cfg.PhaseTimeout)
	lastPrint := time.Now()
	pl := newPoller(b.cl.Conn(), b.prefix(name), ph.Expected)
	var lastGot Counts
	lastChange := time.Now()
	for {
		now := time.Now()
		if ph.ProcessedS == 0 {
			if lag, err := processors.Lag(ctx, b.cl.Brokers(), "hf-processors"); err == nil && lag == 0 {
				ph.ProcessedS = now.Sub(t0).Seconds()
			}
		}
		tq := time.Now()
		err := pl.poll(ctx)
		ph.Polls++
		ph.PollQueryS += time.Since(tq).Seconds()
		if err == nil {
			ph.Got = pl.counts()
			pl.noteReached(ph, now.Sub(t0).Seconds())
			if ph.RawVisibleS == 0 && pl.rawReached() {
				ph.RawVisibleS = now.Sub(t0).Seconds()
			}
			if pl.allReached() && ph.ProcessedS > 0 {
				// Stop the clocks, then check the counts exactly: the check
				// reads every row id of the phase, and it is the bench's
				// work, not the pipeline's.
				snap := b.cpuSnap()
				tv := time.Now()
				v, rawLate, err := pl.verify(ctx)
				ph.PollQueryS += time.Since(tv).Seconds()
				switch {
				case errors.Is(err, errTooMany):
					return cpuSnap{}, fmt.Errorf("%s: %w: rows %+v, want exactly %+v", name, err, pl.counts(), ph.Expected)
				case err != nil:
					// Checked again at the next poll, with a new snapshot.
					b.log.Warn().Err(err).Msg("check row counts")
				case v == verified:
					ph.Got = pl.counts()
					ph.VisibleS = now.Sub(t0).Seconds()
					return snap, nil
				case v == verifiedLate:
					// Rows arrived between the poll and the check: the
					// rows were complete when the check began.
					ph.Got = pl.counts()
					ph.VisibleS = tv.Sub(t0).Seconds()
					if rawLate {
						ph.RawVisibleS = max(ph.RawVisibleS, ph.VisibleS)
					}
					return snap, nil
				default: // duplicates stood in for missing rows: poll on
					ph.Got = pl.counts()
					if !pl.rawReached() {
						ph.RawVisibleS = 0
					}
				}
			}
		} else {
			b.log.Warn().Err(err).Msg("count rows")
		}
		if ph.Got != lastGot {
			lastGot, lastChange = ph.Got, time.Now()
		} else if (ph.ProcessedS > 0 && ph.RawVisibleS > 0 && time.Since(lastChange) > stallAfter) || time.Since(lastChange) > 3*stallAfter {
			return cpuSnap{}, fmt.Errorf("%s: %w: no change for %s (processors caught up: %v, raw rows visible: %v): rows %+v, want %+v%s%s",
				name, ErrNotVisible, time.Since(lastChange).Round(time.Second), ph.ProcessedS > 0, ph.RawVisibleS > 0,
				ph.Got, ph.Expected, b.missing(ctx, name), b.rejections(ctx, name))
		}
		if time.Since(lastPrint) > 5*time.Second {
			lastPrint = time.Now()
			b.pr("  %s: %.0fs: raw rows %d/%d, samples %d/%d, round metrics %d/%d, dlq %d/%d", name, time.Since(t0).Seconds(),
				ph.Got.raw(), ph.Expected.raw(), ph.Got.Samples, ph.Expected.Samples, ph.Got.Rounds, ph.Expected.Rounds, ph.Got.DLQ, ph.Expected.DLQ)
		}
		if time.Now().After(deadline) {
			return cpuSnap{}, fmt.Errorf("%s: %w after %s: rows %+v, want %+v; see the children's logs in %s", name, ErrNotVisible,
				b.cfg.PhaseTimeout, ph.Got, ph.Expected, b.cfg.Dir)
		}
		select {
		case <-ctx.Done():
			return cpuSnap{}, ctx.Err()
		case <-time.After(time.Until(now.Add(every))):
		}
	}
}

// countCols are the tables of Counts, in its field order, with the column
// that carries a phase's prefix. rejected_events, the last field, is counted
// apart (countExpr).
var countCols = []struct{ table, col string }{
	{"campaigns", "campaign_id"}, {"cells", "cell_id"}, {"task_attempts", "cell_id"},
	{"skill_events", "cell_id"}, {"harness_updates", "cell_id"}, {"adherence_judgments", "cell_id"},
	{"labeled_samples", "campaign_id"}, {"round_metrics", "campaign_id"},
}

// nCounts is the number of fields of Counts; the raw tables are the first
// nRaw.
const (
	nCounts = 9
	nRaw    = 6
)

func (c Counts) fields() [nCounts]int {
	return [nCounts]int{c.Campaigns, c.Cells, c.Attempts, c.SkillEvents, c.Updates, c.Judgments, c.Samples, c.Rounds, c.DLQ}
}

func countsOf(v [nCounts]int) Counts {
	return Counts{Campaigns: v[0], Cells: v[1], Attempts: v[2], SkillEvents: v[3], Updates: v[4],
		Judgments: v[5], Samples: v[6], Rounds: v[7], DLQ: v[8]}
}

// countExpr is the subquery counting the phase's rows of table i of Counts:
// count() or, with dedup, uniqExact(event_id). The dead letters are always
// counted once per bad message: the processors' (hf.dlq); the sink records
// its own decode failures beside them.
func countExpr(prefix string, i int, dedup bool) string {
	p := strings.ReplaceAll(prefix, "'", "")
	if i == nCounts-1 {
		return "(SELECT uniqExact(source_topic, source_partition, source_offset) FROM rejected_events WHERE source != 'sink' AND payload LIKE '%" + p + "%')"
	}
	agg := "count()"
	if dedup {
		agg = "uniqExact(event_id)"
	}
	return "(SELECT " + agg + " FROM " + countCols[i].table + " WHERE " + countCols[i].col + " LIKE '" + p + "%')"
}

// queryInts runs SELECT exprs... and returns the values.
func queryInts(ctx context.Context, conn driver.Conn, exprs []string) ([]int, error) {
	vals := make([]uint64, len(exprs))
	dest := make([]any, len(exprs))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := conn.QueryRow(ctx, "SELECT "+strings.Join(exprs, ", ")).Scan(dest...); err != nil {
		return nil, err
	}
	out := make([]int, len(vals))
	for i, v := range vals {
		out[i] = int(v)
	}
	return out, nil
}

// errTooMany: a table holds more distinct rows of the phase than expected.
var errTooMany = errors.New("more distinct rows than expected")

// poller polls the rows of one phase table by table, doing as little work in
// ClickHouse as it can while the clock runs, because the polls run on the
// machine being measured. A table is counted with count() until it reaches
// its expected rows, then not again; when every table has, verify checks
// them all exactly (distinct event ids, since a redelivered row is one row
// twice until a background merge removes it), once, after the clocks
// stopped. A table whose distinct rows fall short is then polled
// deduplicated until it is complete.
type poller struct {
	conn   driver.Conn
	prefix string
	want   [nCounts]int
	// got is each table's latest count for reporting; polled the value of
	// the poll that saw it reach its expected rows (count() or distinct ids,
	// as it was polled), which verify compares against.
	got    [nCounts]int
	polled [nCounts]int
	// exact: the table is polled with distinct ids (the dead letters always).
	exact   [nCounts]bool
	reached [nCounts]bool
	noted   [nCounts]bool // reached at the last noteReached
}

func newPoller(conn driver.Conn, prefix string, want Counts) *poller {
	pl := &poller{conn: conn, prefix: prefix, want: want.fields()}
	for i, w := range pl.want {
		pl.reached[i] = w == 0
		pl.exact[i] = i == nCounts-1
	}
	return pl
}

// poll counts the tables that have not reached their expected rows, in one
// query. The dead letters are counted only once every other table has
// reached its rows (in a second query of the same poll when that poll saw the
// last of them arrive): their count reads every payload in rejected_events,
// the bench's own work on the measured machine, which a storm block would
// otherwise pay at every poll and a clean block never.
func (pl *poller) poll(ctx context.Context) error {
	if err := pl.count(ctx, func(i int) bool { return i != nCounts-1 }); err != nil {
		return err
	}
	for _, r := range pl.reached[:nCounts-1] {
		if !r {
			return nil // the dead letters wait for a later poll
		}
	}
	return pl.count(ctx, func(i int) bool { return i == nCounts-1 })
}

// count counts, in one query, the tables picked by which that have not
// reached their expected rows.
func (pl *poller) count(ctx context.Context, which func(int) bool) error {
	var idx []int
	var exprs []string
	for i, r := range pl.reached {
		if !r && which(i) {
			idx = append(idx, i)
			exprs = append(exprs, countExpr(pl.prefix, i, pl.exact[i]))
		}
	}
	if len(idx) == 0 {
		return nil
	}
	v, err := queryInts(ctx, pl.conn, exprs)
	if err != nil {
		return err
	}
	for k, i := range idx {
		pl.got[i], pl.polled[i] = v[k], v[k]
		pl.reached[i] = v[k] >= pl.want[i]
	}
	return nil
}

// verification is the outcome of verify.
type verification int

const (
	// verified: every table holds exactly its expected distinct rows, and
	// no row arrived since the poll that saw it reach them.
	verified verification = iota
	// verifiedLate: the same, but rows arrived after the poll (duplicates,
	// or rows that completed a table whose count had reached its expected
	// rows with duplicates): complete when the check began.
	verifiedLate
	// short: duplicates stood in for missing rows; those tables are polled
	// exactly from now on.
	short
)

// verify counts every table exactly (and the rows of tables expected empty,
// which are never polled: an extra dead letter in a clean phase must not go
// unseen). More distinct rows than expected is errTooMany. rawLate reports
// whether a raw table made the outcome verifiedLate.
func (pl *poller) verify(ctx context.Context) (out verification, rawLate bool, err error) {
	// A table polled by distinct ids is counted that way only; the others
	// both ways (n at [i][0], distinct at [i][1]).
	var at [nCounts][2]int
	var exprs []string
	for i := range pl.want {
		if !pl.exact[i] {
			at[i][0] = len(exprs)
			exprs = append(exprs, countExpr(pl.prefix, i, false))
		}
		at[i][1] = len(exprs)
		exprs = append(exprs, countExpr(pl.prefix, i, true))
		if pl.exact[i] {
			at[i][0] = at[i][1]
		}
	}
	v, err := queryInts(ctx, pl.conn, exprs)
	if err != nil {
		return short, false, err
	}
	out = verified
	for i := range pl.want {
		n, distinct := v[at[i][0]], v[at[i][1]]
		switch {
		case distinct > pl.want[i]:
			pl.got[i] = distinct
			return short, false, fmt.Errorf("%s: %d distinct rows, want %d: %w", tableName(i), distinct, pl.want[i], errTooMany)
		case distinct < pl.want[i]:
			pl.exact[i], pl.reached[i] = true, false
			out = short
		case n != pl.polled[i]:
			if out == verified {
				out = verifiedLate
			}
			rawLate = rawLate || i < nRaw
		}
		pl.got[i] = distinct
	}
	if out == short {
		rawLate = false
	}
	return out, rawLate, nil
}

func tableName(i int) string {
	if i == nCounts-1 {
		return "rejected_events"
	}
	return countCols[i].table
}

// counts is the latest count of every table (0 for a table expected empty,
// which is only counted by verify).
func (pl *poller) counts() Counts { return countsOf(pl.got) }

// noteReached records in ph.ReachedS the tables that reached their expected
// rows since the last call, at s seconds (again when a table fell short at
// verify and reached them later).
func (pl *poller) noteReached(ph *Phase, s float64) {
	for i, r := range pl.reached {
		if r && !pl.noted[i] && pl.want[i] > 0 {
			if ph.ReachedS == nil {
				ph.ReachedS = map[string]float64{}
			}
			ph.ReachedS[tableName(i)] = s
		}
		pl.noted[i] = r
	}
}

// rawReached: every raw table reached its expected rows.
func (pl *poller) rawReached() bool {
	for i := range nRaw {
		if !pl.reached[i] {
			return false
		}
	}
	return true
}

// allReached: every table reached its expected rows.
func (pl *poller) allReached() bool {
	for _, r := range pl.reached {
		if !r {
			return false
		}
	}
	return true
}

// stallAfter ends a wait whose counts stopped changing although every raw
// row is visible and the processors committed everything.
const stallAfter = 60 * time.Second

// missing names a few updates of the phase without a labeled sample and
// cells with fewer round metrics than rounds, for the error message.
func (b *bench) missing(ctx context.Context, name string) string {
	like := "'" + b.prefix(name) + "%'"
	q := "SELECT update_id, cell_id, cycle FROM harness_updates WHERE cell_id LIKE " + like +
		" AND update_id NOT IN (SELECT update_id FROM labeled_samples WHERE campaign_id LIKE " + like + ") ORDER BY update_id LIMIT 5"
	_, rows, err := chx.QueryStrings(ctx, b.cl.Conn(), q)
	if err != nil || len(rows) == 0 {
		return ""
	}
	return fmt.Sprintf("; updates without a labeled sample (update_id, cell_id, cycle): %v", rows)
}

// rejections summarizes the phase's own events that the processors
// dead-lettered, by stage and reason.
func (b *bench) rejections(ctx context.Context, name string) string {
	q := "SELECT stage, reason_code, count() FROM rejected_events WHERE source != 'sink' AND payload LIKE '%" + b.prefix(name) +
		"%' AND NOT (payload LIKE '%" + b.prefix(name) + "mal-%') GROUP BY stage, reason_code ORDER BY count() DESC LIMIT 5"
	_, rows, err := chx.QueryStrings(ctx, b.cl.Conn(), q)
	if err != nil || len(rows) == 0 {
		return ""
	}
	return fmt.Sprintf("; the phase's events dead-lettered by the processors (stage, reason, count): %v", rows)
}

// quiesce waits, before a measured phase, until the work the previous one
// left behind is done: the trainer has committed every sample (hf-trainer's
// lag is 0; it commits at its checkpoints) and ClickHouse runs no background
// merge in the pipeline's database. It gives up after limit
// (the phase is then measured anyway) and reports what it waited for.
func (b *bench) quiesce(ctx context.Context, name string, limit time.Duration) {
	client := kafkax.NewClient(b.cl.Brokers())
	start := time.Now()
	for {
		lag, lerr := kafkax.GroupLag(ctx, client, "hf-trainer", schemas.TopicSamples)
		var merges uint64
		merr := b.cl.Conn().QueryRow(ctx, "SELECT count() FROM system.merges WHERE database = "+quote(b.cl.Database())).Scan(&merges)
		if lerr == nil && merr == nil && lag == 0 && merges == 0 {
			if d := time.Since(start); d > time.Second {
				b.pr("%s: waited %.1fs for the trainer and ClickHouse's merges to go idle", name, d.Seconds())
			}
			return
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			b.pr("%s: measured although not idle after %s (trainer lag %d %v, merges %d %v)", name, limit, lag, lerr, merges, merr)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond): // poll period
		}
	}
}
