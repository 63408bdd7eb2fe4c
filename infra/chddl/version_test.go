package chddl_test

import (
	"testing"

	"github.com/harnessflow/harnessflow/infra/chddl"
)

func TestParseVersion(t *testing.T) {
	for raw, want := range map[string][3]int{"18.16.1": {18, 16, 1}, "24.8.4.13": {24, 8, 4}, "25.3": {25, 3, 0}, "x": {0, 0, 0}} {
		v := chddl.ParseVersion(raw)
		if [3]int{v.Major, v.Minor, v.Patch} != want || v.String() != raw {
			t.Errorf("ParseVersion(%q) = %+v", raw, v)
		}
	}
	if v := chddl.ParseVersion("18.16.1"); v.AtLeast(19, 1) || !v.AtLeast(18, 16) || !v.AtLeast(1, 99) {
		t.Errorf("AtLeast wrong for %v", v)
	}
}

func TestQuoteIdent(t *testing.T) {
	if got := chddl.QuoteIdent("a`b\\c"); got != "`a\\`b\\\\c`" {
		t.Fatalf("QuoteIdent = %s", got)
	}
}
