package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestIngestCommandRejectsBadConfig(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 30*time.Second)
	code, _, _ := prodRunCLI(t, ctx, "", "ingest", "--brokers", b.Addr(), "--listen", "127.0.0.1:0")
	if code != 2 {
		t.Fatalf("no tokens: exit %d, want 2", code)
	}
	bad := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(bad, []byte("only-a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, _ = prodRunCLI(t, ctx, "", "ingest", "--brokers", b.Addr(), "--listen", "127.0.0.1:0", "--tokens", bad)
	if code != 2 {
		t.Fatalf("bad tokens file: exit %d, want 2", code)
	}
	// A good configuration serves until the context ends, then exits 0.
	good := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(good, []byte("tok proj\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	code, _, stderr := prodRunCLI(t, sctx, "", "ingest", "--brokers", b.Addr(), "--listen", "127.0.0.1:0", "--tokens", good)
	if code != 0 {
		t.Fatalf("good config: exit %d, stderr %s", code, stderr)
	}
}
