package chx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/harnessflow/harnessflow/internal/chx"
)

func TestParseVersion(t *testing.T) {
	for raw, want := range map[string][3]int{"18.16.1": {18, 16, 1}, "24.8.4.13": {24, 8, 4}, "25.3": {25, 3, 0}, "x": {0, 0, 0}} {
		v := chx.ParseVersion(raw)
		if [3]int{v.Major, v.Minor, v.Patch} != want || v.String() != raw {
			t.Errorf("ParseVersion(%q) = %+v", raw, v)
		}
	}
	if v := chx.ParseVersion("18.16.1"); v.AtLeast(19, 1) || !v.AtLeast(18, 16) || !v.AtLeast(1, 99) {
		t.Errorf("AtLeast wrong for %v", v)
	}
}

func TestRetryable(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"), true},
		{fmt.Errorf("send: %w", &clickhouse.Exception{Code: 60, Message: "Table doesn't exist"}), false},
		{fmt.Errorf("send: %w", &clickhouse.Exception{Code: 252, Message: "Too many parts"}), true},
	}
	for _, c := range cases {
		if got := chx.Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestOpenWithoutAddress(t *testing.T) {
	if _, err := chx.Open(context.Background(), " ", ""); !errors.Is(err, chx.ErrNoAddr) {
		t.Fatalf("err = %v", err)
	}
}

func TestQuoteIdent(t *testing.T) {
	if got := chx.QuoteIdent("a`b\\c"); got != "`a\\`b\\\\c`" {
		t.Fatalf("QuoteIdent = %s", got)
	}
}
