package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/bench/e2e"
	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

func init() { registerBench(newBenchSinkCmd) }

type benchSinkOptions struct {
	brokers, clickhouse, database, client string
	cpuProfile                            string
	embedded, viewLive                    bool
	rows, maxRows, viewRows               int
}

func newBenchSinkCmd() *cobra.Command {
	var o benchSinkOptions
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Sink rows/s into ClickHouse against clickhouse-client from a file (the ceiling), same rows, same server",
		Long: `bench sink produces --rows task_attempt events to hf.attempts, then measures, in
one run against the same ClickHouse server:

  sink            the sink consuming them from the broker into task_attempts
                  (decode, batch, native insert, commit); rows/s counts
                  inserted rows, and a second line the time until every
                  offset is committed (after the cell_scores recomputation);
  ceiling         clickhouse-client inserting the same rows from a TSV file
                  into a twin table (same engine);
  client -> Null  the sink's insert path alone (clickhouse-go, same batches)
                  and clickhouse-client, into an ENGINE = Null twin: what the
                  clients cost without the server's merge work.

It prints rows/s for each and the ratio sink / ceiling (goals: >= 200k rows/s
and >= 0.5). With --view-rows N it also fills a separate database with N
generated attempts (INSERT ... SELECT FROM numbers), times each
cross-evaluation view over them live (no cell_scores summaries yet; skip with
--view-live=false), recomputes every cell's summary as the sink does, and
times the views again, checking that they return the live rows. With --embedded it starts its own broker and
clickhouse-server and needs neither address.`,
		Example: "  harnessflow bench sink --embedded --rows 500000\n  harnessflow bench sink --brokers 127.0.0.1:9092 --clickhouse 127.0.0.1:9000 --view-rows 10000000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchSink(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "Kafka brokers (ignored with --embedded)")
	f.StringVar(&o.clickhouse, "clickhouse", "127.0.0.1:9000", "ClickHouse native host:port (ignored with --embedded)")
	f.BoolVar(&o.embedded, "embedded", false, "start an embedded broker and a managed clickhouse-server")
	f.StringVar(&o.database, "database", "hf_bench", "scratch database (dropped and re-created)")
	f.StringVar(&o.client, "client", "", "clickhouse-client binary for the ceiling (default: clickhouse-client, or clickhouse client, on PATH)")
	f.IntVar(&o.rows, "rows", 500000, "task_attempt rows to move")
	f.IntVar(&o.maxRows, "max-rows", 50000, "the sink's rows per insert")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process during the sink phase to this file")
	f.IntVar(&o.viewRows, "view-rows", 0, "also time the cross-evaluation views over this many generated attempts (0: skip)")
	f.BoolVar(&o.viewLive, "view-live", true, "with --view-rows, also time the views before cell_scores is filled (the live deduplication; slow)")
	return cmd
}

func runBenchSink(ctx context.Context, out io.Writer, o benchSinkOptions) error {
	log := obs.NewLogger("bench-sink")
	brokers := kafkax.ParseBrokers(o.brokers)
	addr := o.clickhouse
	if o.embedded {
		dir, err := os.MkdirTemp("", "hf-bench-sink-")
		if err != nil {
			return withCode(2, err)
		}
		defer os.RemoveAll(dir)
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
		if err != nil {
			return withCode(2, err)
		}
		defer b.Close()
		brokers = []string{b.Addr()}
		srv, err := chserver.Start(ctx, chserver.Config{DataDir: filepath.Join(dir, "clickhouse")})
		if err != nil {
			return withCode(2, err)
		}
		defer srv.Stop()
		addr = srv.Addr()
		fmt.Fprintf(out, "embedded broker %s, clickhouse-server %s at %s\n", b.Addr(), srv.Version(), addr)
	}
	client, clientArgs, err := e2e.FindClient(o.client)
	if err != nil {
		return withCode(2, err)
	}
	if err := kafkax.EnsureAllTopics(ctx, brokers); err != nil {
		return withCode(2, err)
	}
	conn, err := chx.Open(ctx, addr, "")
	if err != nil {
		return withCode(2, err)
	}
	defer conn.Close()
	ver, _ := chx.ServerVersion(ctx, conn)
	db := chddl.QuoteIdent(o.database)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + db} {
		if err := conn.Exec(ctx, q); err != nil {
			return withCode(2, err)
		}
	}
	if _, err := chddl.Migrate(ctx, chx.Session(conn), o.database); err != nil {
		return withCode(2, err)
	}
	for _, q := range []string{
		"CREATE TABLE " + db + ".task_attempts_ceiling AS " + db + ".task_attempts",
		"CREATE TABLE " + db + ".task_attempts_null AS " + db + ".task_attempts ENGINE = Null",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			return withCode(2, fmt.Errorf("%s: %w", q, err))
		}
	}

	// The rows.
	evs := benchAttempts(o.rows)
	group := fmt.Sprintf("hf-bench-sink-%d", time.Now().UnixNano())
	if err := skipToEnd(ctx, brokers, group, schemas.TopicAttempts); err != nil {
		log.Warn().Err(err).Msg("could not start the bench group at the end of hf.attempts; older messages count too")
	}
	t0 := time.Now()
	if err := produceAll(ctx, brokers, evs); err != nil {
		return withCode(2, err)
	}
	fmt.Fprintf(out, "server %s, %d task_attempt rows (produced in %.2fs)\n", ver, len(evs), time.Since(t0).Seconds())

	// 1. The sink.
	s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: addr, Database: o.database, Group: group,
		Topics: []string{schemas.TopicAttempts}, MaxRows: o.maxRows, SkipMigrate: true}, chsink.WithLogger(log))
	if err != nil {
		return withCode(2, err)
	}
	stopProfile := func() {}
	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return withCode(2, err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return withCode(2, err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); pf.Close() }
	}
	defer func() { stopProfile() }()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Run(sctx) }()
	var firstAt, end time.Time
	var firstRows int64
	for {
		st := s.Stats()
		if st.Rows > 0 && firstAt.IsZero() {
			firstAt, firstRows = time.Now(), st.Rows
		}
		if st.Rows >= int64(len(evs)) && end.IsZero() {
			end = time.Now()
		}
		// Inserted is what the rate counts; committed (after the cell_scores
		// recomputation) is reported beside it.
		if st.Committed >= int64(len(evs)) {
			break
		}
		select {
		case err := <-done:
			stop()
			return withCode(1, fmt.Errorf("sink stopped early: %v", err))
		case <-ctx.Done():
			stop()
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	committedAt := time.Now()
	stop()
	if err := <-done; err != nil {
		return withCode(1, err)
	}
	stopProfile()
	stopProfile = func() {}
	total := end.Sub(start).Seconds()
	steady := end.Sub(firstAt).Seconds()
	sinkRate := float64(len(evs)) / total
	if steady > 0 && int64(len(evs)) > firstRows {
		sinkRate = float64(int64(len(evs))-firstRows) / steady
	}

	// 2. The ceiling: clickhouse-client from a TSV file, and the Null twins.
	_, cols, data, err := chsink.BuildColumns(evs)
	if err != nil {
		return withCode(2, err)
	}
	tsv, err := os.CreateTemp("", "hf-bench-sink-*.tsv")
	if err != nil {
		return withCode(2, err)
	}
	defer os.Remove(tsv.Name())
	if err := e2e.WriteTSV(tsv, data); err != nil {
		return withCode(2, err)
	}
	tsv.Close()
	host, port := e2e.SplitHostPort(addr)
	colList := strings.Join(cols, ", ")
	ceiling, err := e2e.TimeClient(ctx, client, clientArgs, host, port, tsv.Name(),
		"INSERT INTO "+db+".task_attempts_ceiling ("+colList+") FORMAT TabSeparated")
	if err != nil {
		return withCode(2, err)
	}
	clientNull, err := e2e.TimeClient(ctx, client, clientArgs, host, port, tsv.Name(),
		"INSERT INTO "+db+".task_attempts_null ("+colList+") FORMAT TabSeparated")
	if err != nil {
		return withCode(2, err)
	}
	goNull, err := timeGoInsert(ctx, conn, o.database, "task_attempts_null", evs, o.maxRows)
	if err != nil {
		return withCode(2, err)
	}
	n := float64(len(evs))
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs after the first insert; %.2fs with group join)\n", "sink: broker -> task_attempts", sinkRate, steady, total)
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs after the first insert, until every offset is committed: inserted and cell_scores recomputed)\n",
		"sink incl. recompute + commit", float64(int64(len(evs))-firstRows)/committedAt.Sub(firstAt).Seconds(), committedAt.Sub(firstAt).Seconds())
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs)  ceiling\n", "clickhouse-client TSV -> twin", n/ceiling, ceiling)
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs)\n", "clickhouse-client TSV -> Null", n/clientNull, clientNull)
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs)  the sink's client cost alone\n", "sink writer (clickhouse-go) -> Null", n/goNull, goNull)
	ratio := sinkRate / (n / ceiling)
	fmt.Fprintf(out, "%-34s %12.2f  (goals: >= 200000 rows/s, >= 0.50)\n", "ratio sink / ceiling", ratio)

	if o.viewRows > 0 {
		if err := benchViews(ctx, out, conn, o.database+"_views", o.viewRows, o.viewLive); err != nil {
			return withCode(2, err)
		}
	}
	return nil
}

// benchAttempts returns n attempts spread over 360 cells.
func benchAttempts(n int) []schemas.Event {
	t0 := time.Now().UTC().Truncate(time.Second)
	evs := make([]schemas.Event, n)
	for i := range evs {
		evs[i] = &schemas.TaskAttempt{
			Envelope: schemas.Envelope{EventID: fmt.Sprintf("bench-%09d", i), EventTime: t0.Add(time.Duration(i) * time.Microsecond),
				Project: "bench", Source: "bench"},
			CellID: fmt.Sprintf("cell-%03d", i%360), TaskID: fmt.Sprintf("task-%06d", i/360), StreamIdx: int32(i / 360),
			Cycle: int32(i/360/50 + 1), Attempt: 1, HarnessVersion: "h1", Status: schemas.StatusOK, Score: float64(i%100) / 100,
			Success: i%3 == 0, Final: true, SkillsAvailable: 3, SkillsLoaded: []string{"fix-tests"},
			InputTokens: int64(1000 + i%5000), OutputTokens: int64(100 + i%700), DurationMs: int64(i % 60000),
		}
	}
	return evs
}

func produceAll(ctx context.Context, brokers []string, evs []schemas.Event) error {
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, Topic: schemas.TopicAttempts, BatchSize: 5000, BatchBytes: 8 << 20})
	defer w.Close()
	const chunk = 20000
	msgs := make([]kafka.Message, 0, chunk)
	for i := 0; i < len(evs); i += chunk {
		msgs = msgs[:0]
		for _, ev := range evs[i:min(i+chunk, len(evs))] {
			b, err := schemas.Encode(ev)
			if err != nil {
				return err
			}
			msgs = append(msgs, kafka.Message{Key: []byte(ev.PartitionKey()), Value: b})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// skipToEnd commits group's offsets at the current end of topic, so that the
// bench's sink reads only the rows produced after it.
func skipToEnd(ctx context.Context, brokers []string, group, topic string) error {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 {
		return fmt.Errorf("metadata: %v", err)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	lo, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return err
	}
	var commits []kafka.OffsetCommit
	for _, p := range lo.Topics[topic] {
		commits = append(commits, kafka.OffsetCommit{Partition: p.Partition, Offset: p.LastOffset})
	}
	resp, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: commits}})
	if err != nil {
		return err
	}
	for _, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return p.Error
			}
		}
	}
	return nil
}

func timeGoInsert(ctx context.Context, conn driver.Conn, database, table string, evs []schemas.Event, batch int) (float64, error) {
	w := chsink.NewConnWriter(conn, database)
	t0 := time.Now()
	for i := 0; i < len(evs); i += batch {
		_, cols, data, err := chsink.BuildColumns(evs[i:min(i+batch, len(evs))])
		if err != nil {
			return 0, err
		}
		if err := w.WriteBatch(ctx, table, cols, data); err != nil {
			return 0, err
		}
	}
	return time.Since(t0).Seconds(), nil
}

// benchViews fills database with n generated attempts over 360 cells (2
// benchmarks x 10 agents x (baseline + 5 evolvers) x 3 seeds) and times the
// cross-evaluation views: once live (no cell_scores rows yet) when liveViews
// is set, then, after recomputing every cell's summary as the sink does, best
// of three, checking that they return the live rows.
func benchViews(ctx context.Context, out io.Writer, conn driver.Conn, database string, n int, liveViews bool) error {
	db := chddl.QuoteIdent(database)
	if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		return err
	}
	if _, err := chddl.Migrate(ctx, chx.Session(conn), database); err != nil {
		return err
	}
	t0 := time.Now()
	for _, q := range []string{
		`INSERT INTO ` + db + `.campaigns (event_id, project, campaign_id, benchmarks, anchor_agents, anchor_evolvers, _version)
		 SELECT 'camp', 'bench', 'c1', ['bench-0', 'bench-1'], ['agent-0', 'agent-1', 'agent-2'], ['evolver-1', 'evolver-2', 'evolver-3'], 1`,
		`INSERT INTO ` + db + `.cells (event_id, project, kind, cell_id, campaign_id, benchmark, agent_model, evolver_model, seed, route, _version)
		 SELECT concat('cs-', toString(number)), 'bench', 'started', concat('cell-', toString(number)), 'c1',
		        concat('bench-', toString(intDiv(number, 180))), concat('agent-', toString(number % 10)),
		        if(intDiv(number, 10) % 6 = 0, '', concat('evolver-', toString(intDiv(number, 10) % 6))),
		        toInt32(intDiv(number, 60) % 3), if(intDiv(number, 10) % 6 = 0, 'baseline', 'in_situ'), number
		 FROM numbers(360)`,
		fmt.Sprintf(`INSERT INTO %s.task_attempts (event_id, project, cell_id, task_id, attempt, status, success, final, score, skills_available, _version)
		 SELECT concat('a-', toString(number)), 'bench', concat('cell-', toString(number %% 360)), concat('t-', toString(intDiv(number, 360))),
		        1, 'ok', toUInt8(cityHash64(number) %% 100 < 20 + (number %% 10) * 5 + (intDiv(number %% 360, 10) %% 6) * 2), 1,
		        (cityHash64(number) %% 1000) / 1000, 2, number
		 FROM numbers(%d)`, db, n),
	} {
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("generate view data: %w", err)
		}
	}
	fmt.Fprintf(out, "view data: %d attempts in 360 cells generated in %.1fs\n", n, time.Since(t0).Seconds())
	views := []string{"v_cell_scores", "v_pair_gain", "v_update_gain", "v_benefit_gain"}
	// Rows written by INSERT ... SELECT have no cell_scores summary: the views
	// compute them live (the cost before cell_scores existed).
	live := map[string][][]string{}
	for _, v := range views {
		if !liveViews {
			break
		}
		secs, res, err := timeView(ctx, conn, db, v, 1)
		if err != nil {
			return err
		}
		live[v] = res
		fmt.Fprintf(out, "%-34s %8.3f s  (%d rows, live: no summaries, over %d attempts)\n", "SELECT * FROM "+v, secs, len(res), n)
	}
	// What the sink does after inserting attempts: recompute their cells.
	cells := make([]string, 360)
	for i := range cells {
		cells[i] = fmt.Sprintf("cell-%d", i)
	}
	t1 := time.Now()
	if err := chddl.RecomputeCellScores(ctx, chx.Session(conn), database, cells); err != nil {
		return err
	}
	fmt.Fprintf(out, "cell_scores of all 360 cells recomputed in %.2fs (%.3fs per cell of %d attempts)\n",
		time.Since(t1).Seconds(), time.Since(t1).Seconds()/360, n/360)
	for _, v := range views {
		secs, res, err := timeView(ctx, conn, db, v, 3)
		if err != nil {
			return err
		}
		same := ""
		if want, ok := live[v]; ok {
			same = ", same rows as live"
			if !sameRows(want, res) {
				same = ", DIFFERENT FROM LIVE"
			}
		}
		fmt.Fprintf(out, "%-34s %8.3f s  (%d rows, best of 3, from cell_scores%s, over %d attempts)\n", "SELECT * FROM "+v, secs, len(res), same, n)
	}
	return nil
}

// timeView runs SELECT * FROM db.v (sorted) runs times; it returns the best time and the rows.
func timeView(ctx context.Context, conn driver.Conn, db, v string, runs int) (float64, [][]string, error) {
	best := math.Inf(1)
	var rows [][]string
	for i := 0; i < runs; i++ {
		t := time.Now()
		_, res, err := chx.QueryStrings(ctx, conn, "SELECT * FROM "+db+"."+v)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", v, err)
		}
		best = math.Min(best, time.Since(t).Seconds())
		rows = res
	}
	sort.Slice(rows, func(i, j int) bool { return strings.Join(rows[i], "\t") < strings.Join(rows[j], "\t") })
	return best, rows, nil
}

// sameRows compares two sorted result sets, numbers to 1e-9 relative.
func sameRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] == b[i][j] {
				continue
			}
			x, e1 := strconv.ParseFloat(a[i][j], 64)
			y, e2 := strconv.ParseFloat(b[i][j], 64)
			if e1 != nil || e2 != nil || math.Abs(x-y) > 1e-9*math.Max(1, math.Abs(x)) {
				return false
			}
		}
	}
	return true
}
