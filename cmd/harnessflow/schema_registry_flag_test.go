package main

import (
	"strings"
	"testing"
	"time"
)

// TestSchemaRegistryFlagEverywhere: every command that reads or writes the
// raw topics takes --schema-registry, settable as HF_SCHEMA_REGISTRY, and a
// URL that is no http(s) URL is a usage error (exit 2) naming the flag.
func TestSchemaRegistryFlagEverywhere(t *testing.T) {
	root := newRoot()
	for _, name := range []string{"produce", "consume", "process", "replay", "sink", "up"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("no command %s: %v", name, err)
		}
		f := cmd.Flags().Lookup("schema-registry")
		if f == nil {
			t.Errorf("%s has no --schema-registry", name)
			continue
		}
		if !strings.Contains(f.Usage, "[env HF_SCHEMA_REGISTRY]") {
			t.Errorf("%s --schema-registry: usage %q does not name HF_SCHEMA_REGISTRY", name, f.Usage)
		}
	}
	ctx := prodCtx(t, 30*time.Second)
	for _, args := range [][]string{
		{"process", "--brokers", "127.0.0.1:1", "--schema-registry", "ftp://registry"},
		{"sink", "--brokers", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1", "--schema-registry", "ftp://registry"},
	} {
		code, _, stderr := prodRunCLI(t, ctx, "", args...)
		if code != 2 || !strings.Contains(stderr, "--schema-registry") {
			t.Errorf("%s with a bad registry URL: exit %d, stderr %q", args[0], code, stderr)
		}
	}
	t.Setenv("HF_SCHEMA_REGISTRY", "ftp://registry")
	if code, _, stderr := prodRunCLI(t, ctx, "", "process", "--brokers", "127.0.0.1:1"); code != 2 || !strings.Contains(stderr, "ftp://registry") {
		t.Errorf("process with HF_SCHEMA_REGISTRY set to a bad URL: exit %d, stderr %q", code, stderr)
	}
}
