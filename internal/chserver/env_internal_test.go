package chserver

import (
	"slices"
	"testing"
)

func TestChildEnvAddsAllocatorConfUnlessSet(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/bin", "HOME=/root"}
	got := childEnv(base)
	if want := append(slices.Clone(base), "MALLOC_CONF="+AllocatorConf); !slices.Equal(got, want) {
		t.Fatalf("childEnv = %q, want %q", got, want)
	}
	if len(base) != 2 {
		t.Fatalf("childEnv changed its argument: %q", base)
	}
	own := []string{"PATH=/bin", "MALLOC_CONF=narenas:2"}
	if got := childEnv(own); !slices.Equal(got, own) {
		t.Fatalf("childEnv overrode the operator's MALLOC_CONF: %q", got)
	}
}
