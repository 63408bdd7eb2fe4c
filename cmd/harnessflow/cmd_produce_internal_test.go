package main

import (
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestProduceRefusesInternalTypes: `produce` rejects a line of each of the
// pipeline's derived types, naming it (exit 1; the producer lines are
// produced), and produces them with --allow-internal-types.
func TestProduceRefusesInternalTypes(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := prodCtx(t, 60*time.Second)
	lines := prodJSONL(t, []schemas.Event{producerstest.TaskAttempt(1, "p")})
	for i, typ := range producerstest.DerivedTypes {
		lines = append(lines, prodJSONL(t, []schemas.Event{producerstest.Derived(typ, i, "p")})...)
	}
	in := strings.Join(lines, "\n") + "\n"
	code, _, stderr := prodRunCLI(t, ctx, in, "produce", "--brokers", b.Addr(), "--progress", "0", "-")
	if code != 1 || !strings.HasSuffix(stderr, "produced 1, rejected 4\n") {
		t.Fatalf("derived types without the flag: exit %d; stderr:\n%s", code, stderr)
	}
	for i, typ := range producerstest.DerivedTypes {
		if want := "line " + string(rune('2'+i)) + ": internal event type: " + string(typ); !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	code, _, stderr = prodRunCLI(t, ctx, in, "produce", "--brokers", b.Addr(), "--progress", "0", "--allow-internal-types", "-")
	if code != 0 || !strings.HasSuffix(stderr, "produced 5, rejected 0\n") {
		t.Fatalf("--allow-internal-types: exit %d; stderr:\n%s", code, stderr)
	}
}
