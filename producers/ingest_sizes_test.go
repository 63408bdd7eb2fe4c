package producers_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestGatewayAtTheCaps: the ingest gateway answers 400 naming the field for
// an id over the name cap, and accepts an event of ~3 MB (under the 4 MiB
// event cap), which its producer's old 1000000-byte batch refused with a 400.
func TestGatewayAtTheCaps(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	srv, err := ingest.New(ingest.Config{Brokers: []string{b.Addr()}, Listen: "127.0.0.1:0", Tokens: map[string]string{"tok": "proj"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready after 30s")
	}
	post := func(body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+srv.Addr()+"/v1/events", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	long := strings.Repeat("c", schemas.DefaultNameCap+1)
	attempt := `{"type":"task_attempt","event_time":"2026-12-05T10:00:00Z","cell_id":"` + long +
		`","task_id":"t-1","attempt":1,"status":"ok","score":1,"success":true}`
	if code, body := post(attempt); code != http.StatusBadRequest || !strings.Contains(body, "task_attempt.cell_id: 257 bytes") {
		t.Fatalf("id over the cap: %d %s, want 400 naming task_attempt.cell_id", code, body)
	}
	big := strings.Repeat("x", 3_000_000)
	summary := `{"type":"harness_update","event_time":"2026-12-05T10:00:00Z","cell_id":"c-1","update_id":"u-1",` +
		`"from_version":"h0","to_version":"h1","evidence_summary":"` + big + `"}`
	if code, body := post(summary); code != http.StatusAccepted {
		t.Fatalf("3 MB event: %d %s, want 202", code, body)
	}
}
