package main

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

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/backend"
)

func init() { registerBench(newBenchTrainCmd) }

func newBenchTrainCmd() *cobra.Command {
	var device string
	var batch, steps, requests int
	var mc trainer.ModelConfig
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Trainer throughput (samples/s) and /v1/score latency (p50/p99) on one device",
		Long: `bench train runs --steps optimizer steps of the reward model (default sizes) at
--batch-size on synthetic samples and prints samples/s, then serves /v1/score on a
loopback port and sends --requests sequential requests, printing p50 and p99 latency.
Goal: samples/s above the processors' sample rate at the default batch size.`,
		Example: "  harnessflow bench train --device cpu --steps 20",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if batch < 1 || steps < 1 || requests < 1 {
				return withCode(2, errors.New("--batch-size, --steps and --requests must be positive"))
			}
			return runBenchTrain(cmd.Context(), cmd.OutOrStdout(), device, mc, batch, steps, requests)
		},
	}
	f := cmd.Flags()
	f.StringVar(&device, "device", "auto", "compute backend: auto, cpu or cuda")
	f.IntVar(&batch, "batch-size", 256, "samples per step")
	f.IntVar(&steps, "steps", 20, "timed optimizer steps (after 2 warm-up steps)")
	f.IntVar(&requests, "requests", 500, "/v1/score requests")
	f.IntVar(&mc.Buckets, "buckets", 1<<18, "hashed n-gram buckets")
	f.IntVar(&mc.Dim, "dim", 64, "embedding width")
	f.IntVar(&mc.Hidden, "hidden", 64, "hidden layer width")
	return cmd
}

func runBenchTrain(ctx context.Context, out io.Writer, device string, mc trainer.ModelConfig, batch, steps, requests int) error {
	be, why, err := backend.Open(device)
	if err != nil {
		return withCode(2, err)
	}
	defer be.Close()
	fmt.Fprintf(out, "device: %s\n", why)
	m, err := trainer.NewModel(be, mc)
	if err != nil {
		return withCode(2, err)
	}
	data := trainer.SyntheticExamples(1, batch*4)
	for i := 0; i < 2; i++ {
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

	// /v1/score through the real handler on a loopback port.
	dir, err := os.MkdirTemp("", "hf-bench-train-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t, err := trainer.New(trainer.Config{Brokers: []string{"unused:9092"}, ClickHouse: "unused:9000", CheckpointDir: dir, Model: mc},
		trainer.WithBackend(be))
	if err != nil {
		return err
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
	lat := make([]time.Duration, 0, requests)
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 0; i < requests && ctx.Err() == nil; i++ {
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
