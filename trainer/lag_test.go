package trainer

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// commitLag sums hf_trainer_commit_lag of group over partitions, and says
// how many partitions have a series.
func commitLag(t *testing.T, reg *prometheus.Registry, group string) (sum float64, parts int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "hf_trainer_commit_lag" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "group" && lp.GetValue() == group {
					sum += m.GetGauge().GetValue()
					parts++
				}
			}
		}
	}
	return sum, parts
}

// TestCommitLagFollowsTheFrontier: on a real broker, hf_trainer_commit_lag
// is 0 on every partition of an empty topic, rises to the samples produced
// while they wait in the trainer's batch (BatchAge), and falls to 0 once a
// step has consumed them.
func TestCommitLagFollowsTheFrontier(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ch := testenv.ClickHouse(t)
	reg := prometheus.NewRegistry()
	const group = "lag"
	tr, err := New(Config{
		Brokers: []string{b.Addr()}, ClickHouse: ch.Addr, Database: ch.Database, Group: group,
		CheckpointDir: t.TempDir(), BatchSize: 1000, BatchAge: 3 * time.Second, Listen: "off", Model: smallModel(),
		LagInterval: 50 * time.Millisecond,
	}, WithLogger(zerolog.Nop()), WithBackend(backend.NewCPU()), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var parts int
	testenv.Eventually(t, 60*time.Second, "a lag series per partition of "+schemas.TopicSamples+", all 0", func() bool {
		var sum float64
		sum, parts = commitLag(t, reg, group)
		return parts > 1 && sum == 0
	})
	const n = 40
	produce(t, b.Addr(), genSamples(rand.New(rand.NewPCG(3, 4)), 0, n))
	testenv.Eventually(t, 30*time.Second, "lag 40 while the samples wait for their batch", func() bool {
		sum, _ := commitLag(t, reg, group)
		return sum == n
	})
	testenv.Eventually(t, 30*time.Second, "lag 0 once a step consumed them", func() bool {
		sum, p := commitLag(t, reg, group)
		return sum == 0 && p == parts
	})
}
