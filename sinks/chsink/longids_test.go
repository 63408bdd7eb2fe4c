package chsink_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// TestSinkSummarizesCellsWithLongIDs: 600 cells whose ids are 600 bytes
// (attempts written before ids were capped, or by a producer that skips
// validation) in one batch. The cell_scores recompute put 500 of them in one
// statement of ~300 KB, over ClickHouse's max_query_size; the server
// refused it as a syntax error and the sink stopped, at every start. Now the
// statements are split by bytes and every cell gets its summary.
func TestSinkSummarizesCellsWithLongIDs(t *testing.T) {
	broker := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	brokers := []string{broker.Addr()}
	evs := attempts(0, 600)
	for i, ev := range evs {
		a := ev.(*schemas.TaskAttempt)
		p := fmt.Sprintf("cell-%04d-", i)
		a.CellID = p + strings.Repeat("'", 600-len(p))
	}
	produce(t, brokers, evs)
	s, stop := runSink(t, chsink.Config{Brokers: brokers, ClickHouse: ch.Addr, Database: ch.Database, Group: "gl",
		Topics: []string{schemas.TopicAttempts}, MaxAge: 200 * time.Millisecond, MaxRows: 10000,
		RetryMaxElapsed: 2 * time.Second, RetryMaxInterval: 100 * time.Millisecond})
	testenv.WaitFor(t, 60*time.Second, "every cell's summary", func() (bool, string) {
		n, _ := count(ch.Conn, "SELECT count() FROM cell_scores FINAL")
		return n == 600, fmt.Sprintf("%d summaries, %+v", n, s.Stats())
	})
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
}
