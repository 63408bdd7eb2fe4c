package stages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

// Defaults of TrainConfig (and of `harnessflow bench train`'s flags).
const (
	// DefaultTrainDevice is the compute backend: auto picks CUDA when this
	// build has it and it works, else the CPU.
	DefaultTrainDevice = "auto"
	// DefaultTrainBatchSize is the samples per optimizer step.
	DefaultTrainBatchSize = 256
	// DefaultTrainSteps is the timed optimizer steps.
	DefaultTrainSteps = 20
	// DefaultTrainRequests is the /v1/score requests.
	DefaultTrainRequests = 500
	// trainWarmup is the untimed optimizer steps before the timed ones.
	trainWarmup = 2
)

// TrainConfig sizes `harnessflow bench train`.
type TrainConfig struct {
	// Device is the compute backend: auto, cpu or cuda (backend.Open).
	// Default: DefaultTrainDevice.
	Device string
	// BatchSize is the samples per step. Default: DefaultTrainBatchSize.
	BatchSize int
	// Steps is the timed optimizer steps (after 2 warm-up steps). Default:
	// DefaultTrainSteps.
	Steps int
	// Requests is the sequential /v1/score requests. Default:
	// DefaultTrainRequests.
	Requests int
	// Model sizes the reward model. Default: trainer's defaults.
	Model trainer.ModelConfig
}

func (c *TrainConfig) setDefaults() {
	if c.Device == "" {
		c.Device = DefaultTrainDevice
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultTrainBatchSize
	}
	if c.Steps == 0 {
		c.Steps = DefaultTrainSteps
	}
	if c.Requests == 0 {
		c.Requests = DefaultTrainRequests
	}
}

// Validate reports every size that is not positive, joined.
func (c *TrainConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"batch size", c.BatchSize}, {"steps", c.Steps}, {"requests", c.Requests}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: must be positive", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// Train runs cfg.Steps optimizer steps of the reward model at cfg.BatchSize
// on synthetic samples and prints samples/s to out, then serves /v1/score on
// a loopback port, sends cfg.Requests sequential requests and prints their
// p50 and p99 latency.
func Train(ctx context.Context, cfg TrainConfig, out io.Writer) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("bench train config: %w", err)
	}
	be, why, err := backend.Open(cfg.Device)
	if err != nil {
		return err
	}
	defer be.Close()
	fmt.Fprintf(out, "device: %s\n", why)
	if err := trainSteps(ctx, cfg, be, out); err != nil {
		return err
	}
	return scoreLatency(ctx, cfg, be, out)
}

// trainSteps times cfg.Steps optimizer steps on be (after the warm-up) and
// prints their rate.
func trainSteps(ctx context.Context, cfg TrainConfig, be backend.Backend, out io.Writer) error {
	m, err := trainer.NewModel(be, cfg.Model)
	if err != nil {
		return err
	}
	batch, steps := cfg.BatchSize, cfg.Steps
	data := trainer.SyntheticExamples(1, batch*4)
	for i := 0; i < trainWarmup; i++ {
		if _, err := m.TrainStep(data[:batch]); err != nil {
			return err
		}
	}
	start := time.Now()
	var l trainer.Losses
	for i := 0; i < steps && ctx.Err() == nil; i++ {
		k := i % 4
		if l, err = m.TrainStep(data[k*batch : (k+1)*batch]); err != nil {
			return err
		}
	}
	el := time.Since(start)
	fmt.Fprintf(out, "train: %d steps x %d samples in %v: %.0f samples/s, %.1f ms/step (last loss %.3f)\n",
		steps, batch, el.Round(time.Millisecond), float64(steps*batch)/el.Seconds(), el.Seconds()*1000/float64(steps), l.Total)
	return nil
}

// scoreLatency serves /v1/score through the real handler on a loopback
// port, sends cfg.Requests sequential requests and prints p50 and p99.
func scoreLatency(ctx context.Context, cfg TrainConfig, be backend.Backend, out io.Writer) error {
	dir, err := os.MkdirTemp("", "hf-bench-train-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t, err := trainer.New(trainer.Config{Brokers: []string{"unused:9092"}, ClickHouse: "unused:9000", CheckpointDir: dir, Model: cfg.Model},
		trainer.WithBackend(be))
	if err != nil {
		return err
	}
	// /v1/score answers only from a published checkpoint: publish the
	// untrained weights as one.
	if err := t.Checkpoint(ctx); err != nil {
		return fmt.Errorf("checkpoint before serving: %w", err)
	}
	srv := &http.Server{Handler: t.Handler(), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/v1/score"
	body := `{"update":"plan steps memoize the output before answering","query":"task 3 failed","kind":"skill","evolver":"e","agent":"a","benchmark":"swe"}`
	lat := make([]time.Duration, 0, cfg.Requests)
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 0; i < cfg.Requests && ctx.Err() == nil; i++ {
		s := time.Now()
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("score: status %d", resp.StatusCode)
		}
		lat = append(lat, time.Since(s))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Fprintf(out, "score: %d requests: p50 %v, p99 %v (idle trainer; under training a request waits for the current step)\n",
		len(lat), q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond))
	return nil
}
