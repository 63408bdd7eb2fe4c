package trainer

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// newIdleTrainer returns a trainer that is never run (no broker, no
// ClickHouse), built with opts.
func newIdleTrainer(t *testing.T, opts ...Option) (*Trainer, error) {
	t.Helper()
	return New(Config{Brokers: []string{"unused:9092"}, ClickHouse: "unused:9000", CheckpointDir: t.TempDir(),
		Listen: "off", Model: smallModel()}, append([]Option{WithLogger(zerolog.Nop()), WithBackend(backend.NewCPU())}, opts...)...)
}

// trainerMetricNames returns the hf_trainer_* metric names g gathers.
func trainerMetricNames(t *testing.T, g prometheus.Gatherer) map[string]bool {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "hf_trainer_") {
			out[mf.GetName()] = true
		}
	}
	return out
}

// metricsPage returns what the trainer's /metrics serves.
func metricsPage(tr *Trainer) string {
	rec := httptest.NewRecorder()
	tr.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

var someTrainerMetrics = []string{"hf_trainer_step", "hf_trainer_samples_trained_total", "hf_trainer_invalid_samples_total",
	"hf_trainer_checkpoints_total", "hf_trainer_step_seconds", "hf_trainer_score_seconds",
	"hf_trainer_optimizer_steps", "hf_trainer_learning_rate", "hf_trainer_replay_window_examples", "hf_trainer_replay_paused",
	"hf_trainer_heldout_loss", "hf_trainer_heldout_loss_best", "hf_trainer_replayed_examples_total", "hf_trainer_replay_steps_total",
	"hf_trainer_early_stops_total", "hf_trainer_eval_epoch", "hf_trainer_eval_set_rows"}

// TestWithRegistererReceivesTheTrainersMetrics: the registerer given to the
// trainer (as `harnessflow up` gives its shared registry) holds the
// trainer's hf_trainer_* metrics, and the trainer's own /metrics serves it.
func TestWithRegistererReceivesTheTrainersMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	tr, err := newIdleTrainer(t, WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	got := trainerMetricNames(t, reg)
	page := metricsPage(tr)
	for _, name := range someTrainerMetrics {
		if !got[name] {
			t.Errorf("the registerer given has no %s (it has %v)", name, got)
		}
		if !strings.Contains(page, "\n"+name) {
			t.Errorf("the trainer's /metrics has no %s", name)
		}
	}
	// A second trainer on the same registry is refused, not a panic.
	if _, err := newIdleTrainer(t, WithRegisterer(reg)); err == nil {
		t.Error("a second trainer registered the same metrics in one registry")
	}
}

// TestWithRegistererThatIsNoRegistry: a registerer that is not a registry
// (here one that adds a label) still receives the metrics, and the
// trainer's /metrics still serves them; without WithRegisterer the trainer
// serves its own registry.
func TestWithRegistererThatIsNoRegistry(t *testing.T) {
	t.Parallel()
	inner := prometheus.NewRegistry()
	tr, err := newIdleTrainer(t, WithRegisterer(prometheus.WrapRegistererWith(prometheus.Labels{"trainer": "x"}, inner)))
	if err != nil {
		t.Fatal(err)
	}
	got := trainerMetricNames(t, inner)
	page := metricsPage(tr)
	for _, name := range someTrainerMetrics {
		if !got[name] {
			t.Errorf("the wrapped registry has no %s (it has %v)", name, got)
		}
		if !strings.Contains(page, "\n"+name) {
			t.Errorf("the trainer's /metrics has no %s", name)
		}
	}
	own, err := newIdleTrainer(t)
	if err != nil {
		t.Fatal(err)
	}
	if page := metricsPage(own); !strings.Contains(page, "\nhf_trainer_step ") || !strings.Contains(page, "\ngo_goroutines ") {
		t.Errorf("the default registry's /metrics lacks the trainer's or Go's metrics:\n%s", page)
	}
}
