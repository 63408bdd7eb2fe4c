package chsink_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// blockingScorer inserts and recomputes through the real writer, but a
// recomputation that includes a cell of project block waits until release
// is closed (or its context ends): a project whose cells take forever.
type blockingScorer struct {
	chsink.BatchWriter
	block   string
	entered chan struct{} // closed when the first blocked call starts
	once    sync.Once
	release chan struct{}
}

func (w *blockingScorer) RecomputeCellScores(ctx context.Context, cells []chddl.CellKey) error {
	for _, c := range cells {
		if c.Project == w.block {
			w.once.Do(func() { close(w.entered) })
			select {
			case <-w.release:
			case <-ctx.Done():
				return ctx.Err()
			}
			break
		}
	}
	return w.BatchWriter.(chsink.CellScorer).RecomputeCellScores(ctx, cells)
}

// projectAttempts returns n one-task attempts of project, task ids from
// from on, over the given cells in turn.
func projectAttempts(project string, cells []string, from, n int) []schemas.Event {
	out := make([]schemas.Event, n)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range out {
		k := from + i
		out[i] = &schemas.TaskAttempt{
			Envelope: schemas.Envelope{EventID: fmt.Sprintf("%s-att-%07d", project, k), EventTime: t0.Add(time.Duration(k) * time.Millisecond), Project: project, Source: "test"},
			CellID:   cells[k%len(cells)], TaskID: fmt.Sprintf("task-%d", k), Attempt: 1, Status: schemas.StatusOK,
			Score: float64(k%3) / 2, Success: k%2 == 0, Final: true, SkillsLoaded: []string{},
		}
	}
	return out
}

// uncommitted returns the partitions of topic whose group offset is below
// their end (empty partitions are not).
func uncommitted(t *testing.T, brokers []string, group, topic string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 {
		t.Fatalf("metadata: %v", err)
	}
	var parts []int
	var lreq []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
		lreq = append(lreq, kafka.LastOffsetOf(p.ID))
	}
	committed, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: lreq}})
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, p := range ends.Topics[topic] {
		for _, c := range committed.Topics[topic] {
			// An empty partition (end 0) has nothing to commit.
			if c.Partition == p.Partition && p.LastOffset > 0 && c.CommittedOffset < p.LastOffset {
				out = append(out, p.Partition)
			}
		}
	}
	sort.Ints(out)
	return out
}

// TestSinkRecomputesOtherProjectsWhileOneIsSlow: while project A's
// cell_scores recomputation cannot finish (its cell is huge; here it is
// held), project B's attempts get their summaries and every partition that
// carries none of A's pending rows commits; once A's recomputation ends,
// everything is summarized and committed.
func TestSinkRecomputesOtherProjectsWhileOneIsSlow(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	w := &blockingScorer{BatchWriter: chsink.NewConnWriter(ch.Conn, ch.Database), block: "projA",
		entered: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(w.release) }) }
	defer release()
	s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "iso",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 50 * time.Millisecond}, chsink.WithWriter(w))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { stop(); <-done }()

	a := projectAttempts("projA", []string{"big"}, 0, 1)
	produce(t, brokers, a)
	select {
	case <-w.entered:
	case <-ctx.Done():
		t.Fatal("project A's recomputation never started")
	}

	bCells := []string{"b-0", "b-1", "b-2", "b-3", "b-4", "b-5"}
	b := projectAttempts("projB", bCells, 0, 60)
	produce(t, brokers, b)
	testenv.WaitFor(t, 30*time.Second, "project B's summaries while A's recomputation is held", func() (bool, string) {
		n, err := count(ch.Conn, "SELECT count() FROM cell_scores FINAL WHERE project = 'projB'")
		return err == nil && n == uint64(len(bCells)), fmt.Sprintf("%d B summaries (%v), %+v", n, err, s.Stats())
	})
	// Only A's partition (its one row, then B's rows behind it) may stay
	// uncommitted.
	testenv.WaitFor(t, 30*time.Second, "every partition but A's to commit", func() (bool, string) {
		p := uncommitted(t, brokers, "iso", schemas.TopicAttempts)
		return len(p) <= 1, fmt.Sprintf("uncommitted partitions %v", p)
	})
	if n, err := count(ch.Conn, "SELECT count() FROM cell_scores FINAL WHERE project = 'projA'"); err != nil || n != 0 {
		t.Fatalf("project A summaries %d (%v) while its recomputation is held", n, err)
	}

	release()
	testenv.WaitFor(t, 30*time.Second, "every attempt committed once A's recomputation ends", func() (bool, string) {
		p := uncommitted(t, brokers, "iso", schemas.TopicAttempts)
		return len(p) == 0, fmt.Sprintf("uncommitted partitions %v, %+v", p, s.Stats())
	})
	assertSummariesLive(t, ch.Conn)
}

// timingScorer recomputes through the real writer and notes when each
// cell's first recomputation ended.
type timingScorer struct {
	chsink.BatchWriter
	mu    sync.Mutex
	ended map[chddl.CellKey]time.Time
}

func (w *timingScorer) RecomputeCellScores(ctx context.Context, cells []chddl.CellKey) error {
	err := w.BatchWriter.(chsink.CellScorer).RecomputeCellScores(ctx, cells)
	if err == nil {
		now := time.Now()
		w.mu.Lock()
		for _, c := range cells {
			if _, ok := w.ended[c]; !ok {
				w.ended[c] = now
			}
		}
		w.mu.Unlock()
	}
	return err
}

func (w *timingScorer) endedAt(c chddl.CellKey) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.ended[c]
	return at, ok
}

// BenchmarkRecomputeIsolation measures project B's latency from producing
// one attempt (to a cell of its own, new) to its cell_scores row written,
// while project A streams one-attempt batches into one cell, with that
// cell holding HF_BENCH_BIG_CELL attempts (default 50 000; "absent": A's
// stream goes to a new, small cell instead). It reports the median, p90 and
// max of B's latency (ms) and A's recomputations meanwhile.
//
//	go test -run '^$' -bench RecomputeIsolation -benchtime 40x ./sinks/chsink/
func BenchmarkRecomputeIsolation(b *testing.B) {
	big := 50000
	if v := os.Getenv("HF_BENCH_BIG_CELL"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		big = n
	}
	for _, present := range []bool{false, true} {
		name := "big=absent"
		if present {
			name = fmt.Sprintf("big=%d", big)
		}
		b.Run(name, func(b *testing.B) { benchIsolation(b, present, big) })
	}
}

func benchIsolation(b *testing.B, present bool, big int) {
	broker := testenv.Kafka(b)
	ch := testenv.ClickHouse(b)
	brokers := []string{broker.Addr()}
	w := &timingScorer{BatchWriter: chsink.NewConnWriter(ch.Conn, ch.Database), ended: map[chddl.CellKey]time.Time{}}
	s, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "bench",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 20 * time.Millisecond}, chsink.WithWriter(w))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	aCell := "small"
	if present {
		aCell = "big"
		evs := projectAttempts("projA", []string{aCell}, 0, big)
		for lo := 0; lo < len(evs); lo += 10000 {
			produceTB(b, brokers, evs[lo:min(lo+10000, len(evs))])
		}
		testenv.WaitFor(b, 5*time.Minute, "the big cell ingested", func() (bool, string) {
			st := s.Stats()
			return st.Committed >= int64(big), fmt.Sprintf("%+v", st)
		})
	}
	// A's stream: one attempt at a time into its cell, each produced
	// synchronously, until the measurement ends.
	aw := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	defer aw.Close()
	stopA := make(chan struct{})
	var aWG sync.WaitGroup
	aWG.Add(1)
	go func() {
		defer aWG.Done()
		for k := big; ; k++ {
			select {
			case <-stopA:
				return
			default:
			}
			writeEvents(ctx, aw, projectAttempts("projA", []string{aCell}, k, 1))
			time.Sleep(10 * time.Millisecond) // A's pace: about 100 attempts a second
		}
	}()
	// A's stream runs (its attempts are committed) before B is measured.
	settled := s.Stats().Committed + 20
	testenv.WaitFor(b, time.Minute, "20 of A's streamed attempts committed", func() (bool, string) {
		st := s.Stats()
		return st.Committed >= settled, fmt.Sprintf("%+v", st)
	})

	bw := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	defer bw.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cell := fmt.Sprintf("b-%d", i)
		t0 := time.Now()
		if err := writeEvents(ctx, bw, projectAttempts("projB", []string{cell}, i, 1)); err != nil {
			b.Fatal(err)
		}
		key := chddl.CellKey{Project: "projB", CellID: cell}
		deadline := t0.Add(time.Minute)
		for {
			if at, ok := w.endedAt(key); ok {
				lat = append(lat, at.Sub(t0))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("B's cell %s not summarized within a minute: %+v", cell, s.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.StopTimer()
	close(stopA)
	aWG.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "B-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*9/10]), "B-p90-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "B-max-ms")
}

// writeEvents produces evs synchronously through w.
func writeEvents(ctx context.Context, w *kafka.Writer, evs []schemas.Event) error {
	msgs := make([]kafka.Message, len(evs))
	for i, ev := range evs {
		v, err := schemas.Encode(ev)
		if err != nil {
			return err
		}
		msgs[i] = kafka.Message{Topic: schemas.TopicFor(ev.Type()), Key: []byte(ev.PartitionKey()), Value: v}
	}
	return w.WriteMessages(ctx, msgs...)
}

func produceTB(tb testing.TB, brokers []string, evs []schemas.Event) {
	tb.Helper()
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers})
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := writeEvents(ctx, w, evs); err != nil {
		tb.Fatalf("produce: %v", err)
	}
}
