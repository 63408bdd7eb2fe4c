package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/chcluster"
)

// ClickHouseCluster starts a ClickHouse cluster of the test's own on
// loopback: ZooKeeper and 2 shards × 2 replicas of clickhouse-server named
// chcluster.DefaultName ("hf"), stopped when the test ends. About 10 s to
// start on 2 cores. Without ZooKeeper or java the test fails with the
// install instructions (`make test` installs them); it never skips.
func ClickHouseCluster(t testing.TB) *chcluster.Cluster {
	t.Helper()
	if err := chcluster.Available(); err != nil {
		t.Fatalf("testenv: ClickHouse cluster: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := chcluster.Start(ctx, chcluster.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("testenv: start ClickHouse cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
