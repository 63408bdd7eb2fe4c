package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chcluster"
	"github.com/harnessflow/harnessflow/internal/chdb"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/sinks/chsink"
	"github.com/harnessflow/harnessflow/sinks/report"
	"github.com/harnessflow/harnessflow/trainer"
)

// clusterTables are the tables a processed campaign fills.
var clusterTables = []string{"campaigns", "cells", "task_attempts", "skill_events", "harness_updates",
	"adherence_judgments", "labeled_samples", "round_metrics", "cell_scores"}

// clusterViews are the analyst views (docs/design.md §5).
var clusterViews = []string{"v_cell_scores", "v_pair_gain", "v_update_gain", "v_benefit_gain",
	"v_skill_activation", "v_adherence", "v_round_stability", "v_label_summary"}

// TestClusterMatchesSingleServer runs one simulated campaign through the
// processors into a single ClickHouse server (one sink) and into a
// 2-shard × 2-replica cluster (two sinks of one group, each writing through
// a node of its own shard), SIGKILLs a replica while the rows arrive and
// restarts it, and then requires, read through a replica of each shard:
// every table's rows once (FINAL through the Distributed table), every view
// and the campaign's report equal to the single server's.
func TestClusterMatchesSingleServer(t *testing.T) {
	start := time.Now()
	cl := testenv.ClickHouseCluster(t)
	single := testenv.ClickHouse(t)
	kb := testenv.Kafka(t)
	brokers := []string{kb.Addr()}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	t.Logf("cluster, server and broker up in %s", time.Since(start).Round(time.Millisecond))

	const db = "hf_cluster"
	s1r1, s1r2, s2r1, s2r2 := cl.Node(1, 1), cl.Node(1, 2), cl.Node(2, 1), cl.Node(2, 2)
	// The replica this test kills comes back although it dies mid-insert
	// (chcluster's crash tolerance; a refused start fails StartNode below).
	if r := httpQuery(ctx, t, s1r1.HTTPAddr(), "default", "SELECT value FROM system.merge_tree_settings WHERE name = 'replicated_max_ratio_of_wrong_parts'"); len(r.Rows) != 1 || r.Rows[0][0] != "1" {
		t.Fatalf("replicated_max_ratio_of_wrong_parts on %s: %v, want 1", s1r1.Name(), r.Rows)
	}
	// Migrate through one node, then again through another: nothing to do.
	res := migrateCluster(ctx, t, s2r2, db, cl.Name())
	if len(res.Applied) != len(chddl.Files()) {
		t.Fatalf("first migrate applied %v", res.Applied)
	}
	if again := migrateCluster(ctx, t, s1r1, db, cl.Name()); len(again.Applied) != 0 {
		t.Fatalf("migrate again from another node applied %v", again.Applied)
	}

	run := func(name string, f func(context.Context) error) func() {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f(rctx) }()
		return func() {
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	// The services' warnings, shown if the test fails (they are silent
	// otherwise: the test reads their effects).
	var logs testenv.SyncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("services' warnings and errors (last 8 KiB):\n%s", logs.Tail(8<<10))
		}
	})
	warnLog := func(name string) zerolog.Logger {
		return zerolog.New(&logs).Level(zerolog.WarnLevel).With().Str("service", name).Timestamp().Logger()
	}
	proc, err := processors.New(processors.Config{Brokers: brokers}, processors.WithLogger(warnLog("processors")))
	if err != nil {
		t.Fatal(err)
	}
	stopProc := run("processors", proc.Run)
	defer stopProc()
	var clusterSinks []*chsink.Sink
	sink := func(group, addr, database, cluster string) func() {
		s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: addr, Database: database, Cluster: cluster, Group: group,
			MaxAge: 200 * time.Millisecond, RetryMaxInterval: 500 * time.Millisecond}, chsink.WithLogger(warnLog("sink "+group+" "+addr)))
		if err != nil {
			t.Fatal(err)
		}
		if cluster != "" {
			clusterSinks = append(clusterSinks, s)
		}
		return run("sink "+group+" "+addr, s.Run)
	}
	defer sink("hf-sink-single", single.Addr, single.Database, "")()
	defer sink("hf-sink-cluster", s1r1.Addr()+","+s1r2.Addr(), db, cl.Name())()
	defer sink("hf-sink-cluster", s2r1.Addr()+","+s2r2.Addr(), db, cl.Name())()

	cfg := demoConfig()
	want := CountDemo(generate(t, cfg))
	p, err := producers.New(producers.Config{Brokers: brokers, Source: "simulate"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Run(ctx, cfg, p, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A replica that one sink writes through dies while rows arrive, and
	// comes back on its data: its shard's other replica takes the writes
	// and it catches up from ZooKeeper's replication log.
	reader := openNode(ctx, t, s2r2, db)
	// Every wait below lasts while the pipeline makes progress (the
	// machine's load sets the pace) and gives up after a minute without.
	attemptsIn := func(cond func(got, want DemoCounts) bool) func() (bool, string) {
		return func() (bool, string) {
			got, err := countRows(ctx, reader, cfg.Campaign)
			return err == nil && cond(got, want), fmt.Sprintf("%+v (%v)", got, err)
		}
	}
	testenv.WhileProgressing(t, time.Minute, 4*time.Minute, "a third of the attempts in the cluster", attemptsIn(func(got, want DemoCounts) bool {
		return got.Attempts >= want.Attempts/3
	}))
	cl.KillNode(s1r1)
	t.Logf("killed replica %s at %s", s1r1.Name(), time.Since(start).Round(time.Millisecond))
	// The replica stays down while rows arrive: until the cluster holds
	// more attempts than when it died (or all of them).
	atKill, err := countRows(ctx, reader, cfg.Campaign)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WhileProgressing(t, time.Minute, 4*time.Minute, "attempts arriving while a replica is down", attemptsIn(func(got, want DemoCounts) bool {
		return got.Attempts > atKill.Attempts || got.Attempts >= want.Attempts
	}))
	if err := cl.StartNode(ctx, s1r1); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		conn driver.Conn
	}{{"single server", single.Conn}, {"cluster", reader}} {
		testenv.WhileProgressing(t, time.Minute, 6*time.Minute, c.name+" holds the whole campaign", func() (bool, string) {
			got, err := countRows(ctx, c.conn, cfg.Campaign)
			return err == nil && got.Attempts >= want.Attempts && got.Samples >= want.Samples && got.Rounds >= want.Rounds && got.Cells >= want.Cells,
				fmt.Sprintf("%+v of %+v (%v)", got, want, err)
		})
	}
	t.Logf("campaign in both at %s", time.Since(start).Round(time.Millisecond))
	// The sinks are done when each group has committed every event and the
	// cluster's sinks have verified every cell_scores summary they wrote
	// (a summary recomputed while the replica that took its attempts was
	// down is written short, then repaired: chsink's verify.go). Then every
	// replica fetches what its shard holds, and the answers are final:
	// each comparison below is made once.
	kc := kafkax.NewClient(brokers)
	var settled string
	testenv.WhileProgressing(t, time.Minute, 6*time.Minute, "every sink to commit every event and verify every summary", func() (bool, string) {
		lagSingle, err1 := kafkax.GroupLag(ctx, kc, "hf-sink-single", chsink.DefaultTopics()...)
		lagCluster, err2 := kafkax.GroupLag(ctx, kc, "hf-sink-cluster", chsink.DefaultTopics()...)
		var unverified, repaired int64
		for _, s := range clusterSinks {
			st := s.Stats()
			unverified += st.Unverified
			repaired += st.Repairs
		}
		settled = fmt.Sprintf("single sink's lag %d, cluster sinks' lag %d, summaries unverified %d, repaired %d", lagSingle, lagCluster, unverified, repaired)
		if lagCluster > 0 {
			settled += "; cluster sinks' lag by partition: " + lagByPartition(ctx, kc, "hf-sink-cluster")
		}
		if err := errors.Join(err1, err2); err != nil {
			settled += " (" + err.Error() + ")"
		}
		return err1 == nil && err2 == nil && lagSingle == 0 && lagCluster == 0 && unverified == 0, settled
	})
	t.Logf("sinks settled at %s: %s", time.Since(start).Round(time.Millisecond), settled)
	syncReplicas(ctx, t, cl, db)

	readers := []*chcluster.Node{s1r2, s2r2, s1r1}
	for _, tbl := range clusterTables {
		q := "SELECT count() AS rows, uniqExact(" + keyOf(tbl) + ") AS keys FROM " + tbl + " FINAL"
		ref := httpQuery(ctx, t, single.Server.HTTPAddr(), single.Database, q)
		if ref.Rows[0][0] == "0" {
			t.Errorf("%s: empty on the single server", tbl)
		}
		if ref.Rows[0][0] != ref.Rows[0][1] {
			t.Errorf("%s on the single server: %v rows for %v keys", tbl, ref.Rows[0][0], ref.Rows[0][1])
		}
		for _, nd := range readers {
			if d := testenv.Diff("single server", ref, nd.Name(), httpQuery(ctx, t, nd.HTTPAddr(), db, q), true); d != "" {
				t.Errorf("%s through %s:\n%s", tbl, nd.Name(), d)
			}
		}
	}
	for _, v := range clusterViews {
		q := "SELECT * FROM " + v
		ref := httpQuery(ctx, t, single.Server.HTTPAddr(), single.Database, q)
		if len(ref.Rows) == 0 {
			t.Errorf("%s: empty on the single server", v)
		}
		for _, nd := range readers {
			if d := testenv.Diff("single server", ref, nd.Name(), httpQuery(ctx, t, nd.HTTPAddr(), db, q), false); d != "" {
				t.Errorf("%s through %s:\n%s", v, nd.Name(), d)
			}
		}
	}
	refReport, err := report.Build(ctx, single.Conn, "", cfg.Campaign)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range []*chcluster.Node{s1r2, s2r1} {
		conn := openNode(ctx, t, nd, db)
		r, err := report.Build(ctx, conn, "", cfg.Campaign)
		if err != nil {
			t.Fatalf("report through %s: %v", nd.Name(), err)
		}
		if d := testenv.DiffJSON(refReport, r); d != "" {
			t.Errorf("report through %s differs from the single server's: %s", nd.Name(), d)
		}
	}
	// The rows are sharded: each shard holds part of every event table.
	for _, nd := range []*chcluster.Node{s1r1, s2r1} {
		r := httpQuery(ctx, t, nd.HTTPAddr(), db, "SELECT count() FROM task_attempts_local")
		if r.Rows[0][0] == "0" {
			t.Errorf("shard %d holds no task_attempts", nd.Shard)
		}
	}

	// The trainer on the cluster: its steps go through the Distributed
	// table; restarted from its checkpoint, it forgets the steps after it
	// on both replicas of their shard.
	ckDir := t.TempDir()
	// The trainer's log (warnings up) and its metrics are what a wait on it
	// reports when it gives up.
	var trainerLog testenv.SyncBuffer
	var trainerReg *prometheus.Registry
	train := func() func() {
		trainerReg = prometheus.NewRegistry()
		tr, err := trainer.New(trainer.Config{Brokers: brokers, ClickHouse: s2r1.Addr() + "," + s2r2.Addr(), Database: db,
			Cluster: cl.Name(), CheckpointDir: ckDir, Device: "cpu", Listen: "off"},
			trainer.WithLogger(zerolog.New(&trainerLog).Level(zerolog.WarnLevel)), trainer.WithRegisterer(trainerReg))
		if err != nil {
			t.Fatal(err)
		}
		return run("trainer", tr.Run)
	}
	stopTrainer := train()
	steps := func(nd *chcluster.Node, from string) string {
		return httpQuery(ctx, t, nd.HTTPAddr(), db, "SELECT count() FROM "+from+" FINAL WHERE trainer = 'hf-trainer'").Rows[0][0]
	}
	testenv.WhileProgressing(t, time.Minute, 5*time.Minute, "trainer_steps rows through the cluster", func() (bool, string) {
		n := steps(s1r2, "trainer_steps")
		return n != "0", fmt.Sprintf("%s trainer_steps rows; trainer %s; its warnings: %q", n, metricValues(t, trainerReg,
			"hf_trainer_step", "hf_trainer_samples_trained_total", "hf_trainer_invalid_samples_total", "hf_trainer_commit_lag"), trainerLog.String())
	})
	stopTrainer() // writes its final checkpoint
	real := steps(s1r2, "trainer_steps")
	httpQuery(ctx, t, s1r1.HTTPAddr(), db, "INSERT INTO trainer_steps (trainer, step, written_at) SELECT 'hf-trainer', 1000000 + number, now() FROM numbers(3)")
	// Read back through another node once every replica has fetched what
	// its shard holds.
	for _, nd := range cl.Nodes() {
		httpQuery(ctx, t, nd.HTTPAddr(), db, "SYSTEM SYNC REPLICA "+chddl.QuoteIdent(db)+".trainer_steps"+chddl.LocalSuffix)
	}
	before := steps(s1r2, "trainer_steps")
	stopTrainer = train()
	defer stopTrainer()
	// The restarted trainer deletes them (a mutation on each replica, run
	// in the background): while it runs, nothing else shows progress.
	testenv.Eventually(t, 3*time.Minute, "the steps after the checkpoint forgotten on every replica", func() bool {
		for _, nd := range cl.Nodes() {
			if httpQuery(ctx, t, nd.HTTPAddr(), db, "SELECT count() FROM trainer_steps_local WHERE step >= 1000000").Rows[0][0] != "0" {
				return false
			}
		}
		return true
	})
	if after := steps(s1r2, "trainer_steps"); real == "0" || after != real || before == real {
		t.Errorf("trainer_steps through the cluster: %s rows, %s with 3 past the checkpoint before the restart, %s after", real, before, after)
	}
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// keyOf is the column that identifies a table's rows: one deduplicated row
// per value.
func keyOf(table string) string {
	if table == "cell_scores" {
		return "(project, cell_id)"
	}
	return "event_id"
}

func migrateCluster(ctx context.Context, t *testing.T, nd *chcluster.Node, db, cluster string) chddl.Result {
	t.Helper()
	conn, err := chx.Open(ctx, nd.Addr(), "", chx.Cluster())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := chddl.MigrateCluster(ctx, chx.Session(conn), db, cluster)
	if err != nil {
		t.Fatalf("migrate --cluster through %s: %v", nd.Name(), err)
	}
	return res
}

func openNode(ctx context.Context, t *testing.T, nd *chcluster.Node, db string) driver.Conn {
	t.Helper()
	conn, err := chx.Open(ctx, nd.Addr(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// syncReplicas waits until every replica of every local table has fetched
// what its shard holds (SYSTEM SYNC REPLICA).
func syncReplicas(ctx context.Context, t *testing.T, cl *chcluster.Cluster, db string) {
	t.Helper()
	for _, nd := range cl.Nodes() {
		for _, tbl := range append(clusterTables, "schema_migrations") {
			name := tbl + chddl.LocalSuffix
			if tbl == "schema_migrations" {
				name = tbl
			}
			httpQuery(ctx, t, nd.HTTPAddr(), db, "SYSTEM SYNC REPLICA "+chddl.QuoteIdent(db)+"."+name)
		}
	}
	// SYNC REPLICA waits for the entries a replica has queued; a replica
	// that restarted may not have pulled every entry of the log yet (18.16
	// does not pull first). So wait until the replicas of each shard hold
	// the same rows of every table; a replica that never catches up fails
	// the test here.
	state := func() (bool, string) {
		byShard := map[int]map[string]string{}
		var diff []string
		for _, nd := range cl.Nodes() {
			for _, tbl := range clusterTables {
				got := httpQuery(ctx, t, nd.HTTPAddr(), db, "SELECT count(), uniqExact("+keyOf(tbl)+") FROM "+tbl+chddl.LocalSuffix+" FINAL").Rows[0]
				v := strings.Join(got, "/")
				if byShard[nd.Shard] == nil {
					byShard[nd.Shard] = map[string]string{}
				}
				if w, ok := byShard[nd.Shard][tbl]; ok && w != v {
					diff = append(diff, fmt.Sprintf("%s on %s: %s, its shard's other replica %s", tbl, nd.Name(), v, w))
				}
				byShard[nd.Shard][tbl] = v
			}
		}
		return len(diff) == 0, strings.Join(diff, "; ")
	}
	testenv.WhileProgressing(t, time.Minute, 3*time.Minute, "the replicas of each shard to hold the same rows", state)
}

// httpQuery runs query on the server at addr over HTTP with db as the
// default database and returns a SELECT's TSVWithNames answer (the form
// testenv.Diff compares); other statements return nothing.
func httpQuery(ctx context.Context, t *testing.T, addr, db, query string) testenv.Result {
	t.Helper()
	q, isSelect := query, strings.HasPrefix(query, "SELECT ")
	if isSelect {
		q += "\nFORMAT TSVWithNames"
	}
	// Inserts through a Distributed table return once stored, as the sink's.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/?insert_distributed_sync=1&database="+url.QueryEscape(db), strings.NewReader(q))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s on %s: %v", query, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s on %s: HTTP %d %s %v", query, addr, resp.StatusCode, body, err)
	}
	var r testenv.Result
	if !isSelect {
		return r
	}
	if r.Cols, r.Rows, err = chdb.ParseTSVWithNames(body); err != nil {
		t.Fatal(fmt.Errorf("%s on %s: %w", query, addr, err))
	}
	return r
}

// metricValues sums each named metric's samples in reg, as "name=value"
// pairs (a missing one reads 0).
func metricValues(t *testing.T, reg *prometheus.Registry, names ...string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		return err.Error()
	}
	sum := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum[mf.GetName()] += m.GetGauge().GetValue()
			}
		}
	}
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("%s=%g", n, sum[n]))
	}
	return strings.Join(out, " ")
}

// lagByPartition names each partition of the sink's topics that group has
// not committed to its end: topic/partition committed..end.
func lagByPartition(ctx context.Context, kc *kafka.Client, group string) string {
	ends, err := kafkax.EndOffsets(ctx, kc, chsink.DefaultTopics()...)
	if err != nil {
		return err.Error()
	}
	c, err := kafkax.Committed(ctx, kc, group, ends)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for topic, ps := range ends {
		for id, end := range ps {
			if got := c[topic][id]; got < end {
				parts = append(parts, fmt.Sprintf("%s/%d %d..%d", topic, id, got, end))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
