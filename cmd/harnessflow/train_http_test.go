package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTrainHTTPSecurityFlags: `train` refuses, with status 2 and a message
// naming the fix, a --score-token-file readable by others, an empty one,
// and --tls-cert without --tls-key, before it connects to anything.
func TestTrainHTTPSecurityFlags(t *testing.T) {
	t.Parallel()
	ctx := prodCtx(t, 60*time.Second)
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("tok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"train", "--brokers", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1", "--checkpoint-dir", filepath.Join(dir, "ck"), "--device", "cpu"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--score-token-file", loose}, "chmod 600"},
		{[]string{"--score-token-file", empty}, "is empty"},
		{[]string{"--score-token-file", filepath.Join(dir, "missing")}, "score token file"},
		{[]string{"--tls-cert", loose}, "--tls-key"},
	} {
		code, _, stderr := prodRunCLI(t, ctx, "", append(append([]string{}, base...), c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("train %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
