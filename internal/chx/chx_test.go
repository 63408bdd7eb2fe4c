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
		// A Distributed query whose pooled connection to a restarted
		// replica was stale (seen in the cluster test after a SIGKILL).
		{fmt.Errorf("recompute: %w", &clickhouse.Exception{Code: 32, Message: "Attempt to read after eof: while receiving packet from 127.0.0.1:41781"}), true},
		// The same code about the data a client sent is the query's fault.
		{fmt.Errorf("send: %w", &clickhouse.Exception{Code: 32, Message: "Attempt to read after eof"}), false},
		{fmt.Errorf("send: %w", &clickhouse.Exception{Code: 279, Message: "All connection tries failed"}), true},
		{fmt.Errorf("send: %w", &clickhouse.Exception{Code: 242, Message: "Table is in readonly mode"}), true},
		{fmt.Errorf("send: %w", &clickhouse.Exception{Code: 999, Message: "Coordination::Exception: Connection loss"}), true},
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
