package chddl_test

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chx"
)

var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// TestAnalystGuideQueriesRun runs every SQL example of docs/analysts.md
// against the view fixture and requires each to answer with rows.
func TestAnalystGuideQueriesRun(t *testing.T) {
	guide, err := os.ReadFile("../../docs/analysts.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlBlock.FindAllSubmatch(guide, -1)
	if len(blocks) < 10 {
		t.Fatalf("docs/analysts.md has %d sql examples, want at least 10", len(blocks))
	}
	ch := migrated(t)
	f := viewsFixture(true)
	f.add("rejected_events", row{"event_id": "rj-1", "stage": "syntax", "reason_code": "bad_enum", "message": "status: bad enum",
		"source_topic": "hf.attempts", "source_partition": int32(1), "source_offset": int64(9)})
	f.add("rejected_events", row{"event_id": "rj-2", "stage": "decode", "reason_code": "malformed", "message": "not avro",
		"source_topic": "hf.attempts", "source_partition": int32(2), "source_offset": int64(4)})
	f.insert(t, ch.Conn, 1)
	insertCriticEvals(t, ch.Conn, 1)
	for i, b := range blocks {
		q := string(b[1])
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cols, rows, err := chx.QueryStrings(ctx, ch.Conn, q)
		cancel()
		if err != nil {
			t.Errorf("example %d failed: %v\n%s", i+1, err, q)
			continue
		}
		if len(rows) == 0 {
			t.Errorf("example %d returned no rows on the fixture:\n%s", i+1, q)
			continue
		}
		t.Logf("example %d: %v %v", i+1, cols, rows[0])
	}
}
