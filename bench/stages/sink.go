package stages

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/bench/e2e"
	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// Defaults of SinkConfig (and of `harnessflow bench sink`'s flags).
const (
	// DefaultSinkDatabase is the scratch database, dropped and re-created.
	DefaultSinkDatabase = "hf_bench"
	// DefaultSinkRows is the task_attempt rows moved.
	DefaultSinkRows = 500000
	// DefaultSinkMaxRows is the sink's rows per insert.
	DefaultSinkMaxRows = 50000
)

// SinkConfig sizes `harnessflow bench sink`.
type SinkConfig struct {
	// Brokers to produce to and sink from. Required unless Embedded.
	Brokers []string
	// ClickHouse is the server's native host:port. Required unless Embedded.
	ClickHouse string
	// Embedded starts an embedded broker and a managed clickhouse-server for
	// the run instead (Brokers and ClickHouse are then ignored). Default:
	// false.
	Embedded bool
	// Database is the scratch database, dropped and re-created; the views
	// are timed in Database + "_views". Default: DefaultSinkDatabase.
	Database string
	// Client is the clickhouse-client binary for the ceiling. Default:
	// clickhouse-client, or clickhouse client, on PATH (e2e.FindClient).
	Client string
	// Rows is the task_attempt rows moved. Default: DefaultSinkRows.
	Rows int
	// MaxRows is the sink's rows per insert (and the batch of the
	// clickhouse-go insert into the Null twin). Default: DefaultSinkMaxRows.
	MaxRows int
	// CPUProfile, when set, receives a pprof CPU profile of this process
	// during the sink phase. Default: nil.
	CPUProfile io.Writer
	// ViewRows, when positive, also times the cross-evaluation views over
	// this many generated attempts. Default: 0 (skip).
	ViewRows int
	// ViewLive, with ViewRows, also times the views before cell_scores is
	// filled (the live deduplication; slow). Default: false (the command's
	// --view-live is on by default).
	ViewLive bool
}

func (c *SinkConfig) setDefaults() {
	if c.Database == "" {
		c.Database = DefaultSinkDatabase
	}
	if c.Rows == 0 {
		c.Rows = DefaultSinkRows
	}
	if c.MaxRows == 0 {
		c.MaxRows = DefaultSinkMaxRows
	}
}

// Sink produces cfg.Rows task_attempt events to hf.attempts, then measures,
// in one run against the same ClickHouse server, the sink consuming them
// into task_attempts, clickhouse-client inserting the same rows from a TSV
// file into a twin table (the ceiling), and both clients into an ENGINE =
// Null twin; with cfg.ViewRows it also times the cross-evaluation views. It
// prints its rows to out as it goes. An error of the sink itself wraps
// ErrFailed.
func Sink(ctx context.Context, cfg SinkConfig, out io.Writer, opts ...Option) error {
	o := newOptions(opts)
	cfg.setDefaults()
	if cfg.Embedded {
		brokers, addr, stop, err := startSinkServers(ctx, out)
		if err != nil {
			return err
		}
		defer stop()
		cfg.Brokers, cfg.ClickHouse = brokers, addr
	}
	return sinkBench(ctx, cfg, out, o.log)
}

// startSinkServers starts the embedded broker and a managed
// clickhouse-server in a temporary directory, and prints where they listen;
// stop stops both and removes the directory.
func startSinkServers(ctx context.Context, out io.Writer) (brokers []string, addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "hf-bench-sink-")
	if err != nil {
		return nil, "", nil, err
	}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: filepath.Join(dir, "clickhouse")})
	if err != nil {
		b.Close()
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}, b.TopicOption()); err != nil {
		srv.Stop()
		b.Close()
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	fmt.Fprintf(out, "embedded broker %s, clickhouse-server %s at %s\n", b.Addr(), srv.Version(), srv.Addr())
	stop = func() {
		srv.Stop()
		b.Close()
		os.RemoveAll(dir)
	}
	return []string{b.Addr()}, srv.Addr(), stop, nil
}

// sinkBench is Sink on cfg's broker and server.
func sinkBench(ctx context.Context, cfg SinkConfig, out io.Writer, log zerolog.Logger) error {
	client, clientArgs, err := e2e.FindClient(cfg.Client)
	if err != nil {
		return err
	}
	if err := kafkax.EnsureAllTopics(ctx, cfg.Brokers); err != nil {
		return err
	}
	conn, err := chx.Open(ctx, cfg.ClickHouse, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	ver, _ := chx.ServerVersion(ctx, conn)
	if err := prepareSinkDatabase(ctx, conn, cfg.Database); err != nil {
		return err
	}

	// The rows.
	evs := benchAttempts(cfg.Rows)
	group := fmt.Sprintf("hf-bench-sink-%d", time.Now().UnixNano())
	if err := skipToEnd(ctx, cfg.Brokers, group, schemas.TopicAttempts); err != nil {
		log.Warn().Err(err).Msg("could not start the bench group at the end of hf.attempts; older messages count too")
	}
	t0 := time.Now()
	if err := produceAll(ctx, cfg.Brokers, evs); err != nil {
		return err
	}
	fmt.Fprintf(out, "server %s, %d task_attempt rows (produced in %.2fs)\n", ver, len(evs), time.Since(t0).Seconds())

	// 1. The sink.
	st, err := timeSink(ctx, cfg, group, len(evs), log)
	if err != nil {
		return err
	}
	// 2. The ceiling: clickhouse-client from a TSV file, and the Null twins.
	ceil, err := timeCeilings(ctx, conn, cfg, client, clientArgs, evs)
	if err != nil {
		return err
	}
	printSink(out, st, ceil, len(evs))

	if cfg.ViewRows > 0 {
		if err := benchViews(ctx, out, conn, cfg.Database+"_views", cfg.ViewRows, cfg.ViewLive); err != nil {
			return err
		}
	}
	return nil
}

// prepareSinkDatabase drops and re-creates database with every migration,
// and adds task_attempts' two twins: task_attempts_ceiling (same engine)
// and task_attempts_null (ENGINE = Null).
func prepareSinkDatabase(ctx context.Context, conn driver.Conn, database string) error {
	db := chddl.QuoteIdent(database)
	if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		return err
	}
	if _, err := chddl.Migrate(ctx, chx.Session(conn), database); err != nil {
		return err
	}
	for _, q := range []string{
		"CREATE TABLE " + db + ".task_attempts_ceiling AS " + db + ".task_attempts",
		"CREATE TABLE " + db + ".task_attempts_null AS " + db + ".task_attempts ENGINE = Null",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// sinkTimes is what timeSink measured of a sink moving rows rows.
type sinkTimes struct {
	rows int64
	// firstRows were inserted by the first insert, at firstAt.
	firstRows int64
	// total is the seconds from the sink's start (group join included) until
	// every row was inserted; steady the same from the first insert.
	total, steady float64
	// rate is the rows/s after the first insert (over total when the first
	// insert held every row).
	rate float64
	// firstAt is when the first insert was seen, committedAt when every
	// offset was committed (after the cell_scores recomputation).
	firstAt, committedAt time.Time
}

// timeSink runs a sink of group over hf.attempts into cfg.Database until
// it has committed rows rows, profiling it as cfg asks, and times it.
// Errors of the sink itself wrap ErrFailed.
func timeSink(ctx context.Context, cfg SinkConfig, group string, rows int, log zerolog.Logger) (sinkTimes, error) {
	s, err := chsink.New(chsink.Config{Brokers: cfg.Brokers, ClickHouse: cfg.ClickHouse, Database: cfg.Database, Group: group,
		Topics: []string{schemas.TopicAttempts}, MaxRows: cfg.MaxRows, SkipMigrate: true}, chsink.WithLogger(log))
	if err != nil {
		return sinkTimes{}, err
	}
	if cfg.CPUProfile != nil {
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return sinkTimes{}, err
		}
		defer pprof.StopCPUProfile()
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Run(sctx) }()
	st := sinkTimes{rows: int64(rows)}
	var end time.Time
	for {
		stats := s.Stats()
		if stats.Rows > 0 && st.firstAt.IsZero() {
			st.firstAt, st.firstRows = time.Now(), stats.Rows
		}
		if stats.Rows >= st.rows && end.IsZero() {
			end = time.Now()
		}
		// Inserted is what the rate counts; committed (after the cell_scores
		// recomputation) is reported beside it.
		if stats.Committed >= st.rows {
			break
		}
		select {
		case err := <-done:
			return sinkTimes{}, failed(fmt.Errorf("sink stopped early: %w", err))
		case <-ctx.Done():
			return sinkTimes{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	st.committedAt = time.Now()
	stop()
	if err := <-done; err != nil {
		return sinkTimes{}, failed(err)
	}
	st.total = end.Sub(start).Seconds()
	st.steady = end.Sub(st.firstAt).Seconds()
	st.rate = float64(rows) / st.total
	if st.steady > 0 && st.rows > st.firstRows {
		st.rate = float64(st.rows-st.firstRows) / st.steady
	}
	return st, nil
}

// sinkCeilings are the seconds each client took to insert the same rows:
// clickhouse-client from TSV into the twin (the ceiling) and into the Null
// twin, and the sink's clickhouse-go writer into the Null twin.
type sinkCeilings struct {
	ceiling, clientNull, goNull float64
}

// timeCeilings times the three inserts of sinkCeilings over evs.
func timeCeilings(ctx context.Context, conn driver.Conn, cfg SinkConfig, client string, clientArgs []string, evs []schemas.Event) (sinkCeilings, error) {
	var c sinkCeilings
	_, cols, data, err := chsink.BuildColumns(evs)
	if err != nil {
		return c, err
	}
	tsv, err := os.CreateTemp("", "hf-bench-sink-*.tsv")
	if err != nil {
		return c, err
	}
	defer os.Remove(tsv.Name())
	if err := e2e.WriteTSV(tsv, data); err != nil {
		return c, err
	}
	tsv.Close()
	host, port := e2e.SplitHostPort(cfg.ClickHouse)
	db := chddl.QuoteIdent(cfg.Database)
	colList := strings.Join(cols, ", ")
	if c.ceiling, err = e2e.TimeClient(ctx, client, clientArgs, host, port, tsv.Name(),
		"INSERT INTO "+db+".task_attempts_ceiling ("+colList+") FORMAT TabSeparated"); err != nil {
		return c, err
	}
	if c.clientNull, err = e2e.TimeClient(ctx, client, clientArgs, host, port, tsv.Name(),
		"INSERT INTO "+db+".task_attempts_null ("+colList+") FORMAT TabSeparated"); err != nil {
		return c, err
	}
	if c.goNull, err = timeGoInsert(ctx, conn, cfg.Database, "task_attempts_null", evs, cfg.MaxRows); err != nil {
		return c, err
	}
	return c, nil
}

// printSink prints the sink's rates beside the ceilings' and their ratio.
func printSink(out io.Writer, st sinkTimes, c sinkCeilings, rows int) {
	n := float64(rows)
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs after the first insert; %.2fs with group join)\n", "sink: broker -> task_attempts", st.rate, st.steady, st.total)
	committed := st.committedAt.Sub(st.firstAt).Seconds()
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs after the first insert, until every offset is committed: inserted and cell_scores recomputed)\n",
		"sink incl. recompute + commit", float64(st.rows-st.firstRows)/committed, committed)
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs)  ceiling\n", "clickhouse-client TSV -> twin", n/c.ceiling, c.ceiling)
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs)\n", "clickhouse-client TSV -> Null", n/c.clientNull, c.clientNull)
	fmt.Fprintf(out, "%-34s %12.0f rows/s  (%.2fs)  the sink's client cost alone\n", "sink writer (clickhouse-go) -> Null", n/c.goNull, c.goNull)
	ratio := st.rate / (n / c.ceiling)
	fmt.Fprintf(out, "%-34s %12.2f  (goals: >= 200000 rows/s, >= 0.50)\n", "ratio sink / ceiling", ratio)
}
