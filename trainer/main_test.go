package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// childEnv makes the test binary act as a trainer process (for SIGKILL tests):
// its value is the JSON Config.
const childEnv = "HF_TRAINER_TEST_CHILD_CONFIG"

func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(runChild(raw))
	}
	testenv.Main(m)
}

func runChild(raw string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tr, err := New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	if err := tr.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// startBroker starts an embedded broker whose groups accept short session
// timeouts, so a SIGKILLed member is evicted quickly.
func startBroker(t *testing.T) string {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}, b.TopicOption()); err != nil {
		t.Fatal(err)
	}
	return b.Addr()
}

// genSamples makes n labeled samples whose effect depends on a marker token
// (as in synth), spread over 12 cells with growing harness versions. Sample
// id i is round i/12 of cell i%12; the round's 12 siblings share a seed (one
// of 40, by round), so the held-out split (campaign+seed groups) keeps them
// together and holds out some rounds.
func genSamples(r *rand.Rand, from, n int) []*schemas.LabeledSample {
	exs := synth(r, n)
	out := make([]*schemas.LabeledSample, n)
	for i, ex := range exs {
		id := from + i
		s := &schemas.LabeledSample{
			SampleID: fmt.Sprintf("s-%06d", id), UpdateID: fmt.Sprintf("u-%06d", id), CellID: fmt.Sprintf("cell-%02d", id%12),
			CampaignID: "camp", Benchmark: ex.Benchmark, AgentModel: ex.Agent, EvolverModel: ex.Evolver, Cycle: int32(id / 12), Seed: int32(id/12) % 40,
			Query: ex.Query, Update: ex.Update, ArtifactKind: ex.Kind, Effect: ex.Effect, Label: LabelNames[ex.Label],
			HarnessVersion: fmt.Sprintf("h%d", id/12), HarnessVersionIndex: int32(id / 12), Route: schemas.RouteInSitu,
			ProducedAt: time.UnixMilli(1_700_000_000_000 + int64(id)).UTC(),
		}
		s.EventID = "sample:" + s.SampleID
		s.EventTime = s.ProducedAt
		s.Project = "p"
		s.Source = "test"
		out[i] = s
	}
	return out
}

func produce(t *testing.T, addr string, samples []*schemas.LabeledSample) {
	t.Helper()
	produceTo(t, addr, -1, samples)
}
