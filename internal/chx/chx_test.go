package chx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/harnessflow/harnessflow/internal/chx"
)

func TestRetryable(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	if _, err := chx.Open(context.Background(), " ", ""); !errors.Is(err, chx.ErrNoAddr) {
		t.Fatalf("err = %v", err)
	}
}
