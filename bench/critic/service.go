package critic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/stack"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// The closed loop through the service (issue 27's "done when"): the
// training campaigns go through the real pipeline as a user's would —
// produce → process → train, the `harnessflow up` stack with its defaults
// — and the candidates of campaigns the service has never seen are posted
// to its /v1/score. Nothing here trains: the figures are the served
// checkpoint's.

// ServiceConfig configures RunService. Zero fields take the defaults.
type ServiceConfig struct {
	// Campaign is the campaign id of every simulated campaign. Default:
	// "critic-svc".
	Campaign string
	// TrainSeeds are the campaigns sent to the service; HeldoutSeeds the
	// campaigns it never sees, whose candidates it scores. Default:
	// 1..150 and 151..200.
	TrainSeeds, HeldoutSeeds []int64
	// Scale and SimBatchSize are sim.Config's. Default: 10 and 5.
	Scale, SimBatchSize int
	// Benchmarks, Agents and Evolvers restrict the campaigns. Default: the
	// simulator's.
	Benchmarks, Agents, Evolvers []string
	// K is the candidates per held-out (cell, round). Default: 5.
	K int
	// Arms are the text-signal settings, each on a fresh stack. Default:
	// on, off.
	Arms []bool
	// Resamples and Seed set the bootstrap over cells. Default: 1000, 0.
	Resamples int
	Seed      uint64
	// Timeout bounds each wait (the campaigns processed, the trainer
	// settled). Default: 20 minutes.
	Timeout time.Duration
	// DataDir is where each arm's stack keeps its data (a fresh folder
	// under it per arm). Default: a temporary folder, removed at the end.
	DataDir string
	// Settle is how long the served checkpoint must stay the same before
	// the candidates are scored: longer than the trainer's checkpoint
	// interval (30 s), so that the checkpoint after its last step is the
	// one served. Default: 40 s.
	Settle time.Duration
	// Listen is each stack's broker, ingest, trainer and metrics address.
	// Default: 127.0.0.1:0 (free ports).
	Listen string
}

func (c *ServiceConfig) setDefaults() {
	if c.Campaign == "" {
		c.Campaign = "critic-svc"
	}
	if c.TrainSeeds == nil {
		c.TrainSeeds = seedRange(1, 150)
	}
	if c.HeldoutSeeds == nil {
		c.HeldoutSeeds = seedRange(151, 200)
	}
	if c.Scale == 0 {
		c.Scale = 10
	}
	if c.SimBatchSize == 0 {
		c.SimBatchSize = 5
	}
	if c.K == 0 {
		c.K = 5
	}
	if c.Arms == nil {
		c.Arms = []bool{true, false}
	}
	if c.Resamples == 0 {
		c.Resamples = 1000
	}
	if c.Timeout == 0 {
		c.Timeout = 20 * time.Minute
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.Settle == 0 {
		c.Settle = 40 * time.Second
	}
}

// Validate reports every invalid field (after defaults), joined.
func (c *ServiceConfig) Validate() error {
	var errs []error
	if len(c.TrainSeeds) == 0 || len(c.HeldoutSeeds) == 0 {
		errs = append(errs, fmt.Errorf("%w: want training and held-out seeds", ErrConfig))
	}
	seen := map[int64]bool{}
	for _, s := range append(append([]int64(nil), c.TrainSeeds...), c.HeldoutSeeds...) {
		if seen[s] {
			errs = append(errs, fmt.Errorf("%w: seed %d repeats (a held-out campaign must be one the service never saw)", ErrConfig, s))
		}
		seen[s] = true
	}
	if c.K < 2 {
		errs = append(errs, fmt.Errorf("%w: %d candidates: want ≥ 2", ErrConfig, c.K))
	}
	if len(c.Arms) == 0 {
		errs = append(errs, fmt.Errorf("%w: no arm", ErrConfig))
	}
	for _, sc := range c.sims(c.TrainSeeds[:min(1, len(c.TrainSeeds))], true) {
		if err := sc.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *ServiceConfig) sims(seeds []int64, text bool) []sim.Config {
	base := Config{Campaign: c.Campaign, Seeds: seeds, Scale: c.Scale, SimBatchSize: c.SimBatchSize,
		Benchmarks: c.Benchmarks, Agents: c.Agents, Evolvers: c.Evolvers}
	return base.sims(text)
}

// ServiceArm is the outcome of one text-signal setting.
type ServiceArm struct {
	TextSignal bool
	// Sent and Samples are the training campaigns' events and labeled
	// samples; Trained the samples the trainer trained on (its own
	// held-out groups are the rest).
	Sent, Samples, Trained int
	// ModelVersion, CheckpointSHA256 and Warming name the served
	// checkpoint that scored every candidate.
	ModelVersion, CheckpointSHA256 string
	Warming                        bool
	// ByEffect and ByReward pick the candidate with the highest effect and
	// the highest reward (effect − λ·std) of /v1/score.
	ByEffect, ByReward LoopPoint
	// Requests is the /v1/score requests sent.
	Requests int
}

// RunService runs the closed loop through the service for each arm.
func RunService(ctx context.Context, cfg ServiceConfig, out io.Writer) ([]*ServiceArm, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	root := cfg.DataDir
	if root == "" {
		dir, err := os.MkdirTemp("", "hf-bench-critic-svc-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		root = dir
	}
	var arms []*ServiceArm
	for _, text := range cfg.Arms {
		fmt.Fprintf(out, "== service loop, text signal %s: %d training campaigns sent, %d held-out campaigns never sent, %d candidates per round\n",
			onOff(text), len(cfg.TrainSeeds), len(cfg.HeldoutSeeds), cfg.K)
		a, err := runServiceArm(ctx, cfg, text, fmt.Sprintf("%s/text-%s", root, onOff(text)), out)
		if err != nil {
			return arms, fmt.Errorf("text signal %s: %w", onOff(text), err)
		}
		writeServiceSummary(out, a)
		arms = append(arms, a)
	}
	return arms, nil
}

func runServiceArm(ctx context.Context, cfg ServiceConfig, text bool, dataDir string, out io.Writer) (*ServiceArm, error) {
	t0 := time.Now()
	a := &ServiceArm{TextSignal: text}
	st, err := stack.New(stack.Config{DataDir: dataDir, BrokerListen: cfg.Listen, IngestListen: cfg.Listen,
		TrainerListen: cfg.Listen, MetricsListen: cfg.Listen, Device: "cpu"}, stack.WithLogger(zerolog.Nop()))
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(sctx) }()
	defer func() {
		stop()
		<-done
	}()
	select {
	case <-st.Ready():
	case err := <-done:
		done <- err
		return nil, fmt.Errorf("stack: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ep := st.Endpoints()

	// The training campaigns, as a producer sends them.
	p, err := producers.New(producers.Config{Brokers: kafkax.ParseBrokers(ep.Brokers), Source: "simulate"})
	if err != nil {
		return nil, err
	}
	for _, sc := range cfg.sims(cfg.TrainSeeds, text) {
		var events []schemas.Event
		if err := sim.Generate(sc, func(ev schemas.Event) error { events = append(events, ev); return nil }); err != nil {
			_ = p.Close(context.Background())
			return nil, err
		}
		a.Sent += len(events)
		a.Samples += stack.CountDemo(events).Samples
		if _, err := sim.Run(ctx, sc, p, io.Discard); err != nil {
			_ = p.Close(context.Background())
			return nil, fmt.Errorf("send seed %d: %w", sc.Seed, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		return nil, fmt.Errorf("deliver the training campaigns: %w", err)
	}
	fmt.Fprintf(out, "  sent %d events of %d campaigns (%d labeled samples to come) in %s\n", a.Sent, len(cfg.TrainSeeds), a.Samples, time.Since(t0).Round(time.Millisecond))

	conn := st.ClickHouseConn()
	count := func(q string, args ...any) (int, error) {
		var n uint64
		err := conn.QueryRow(ctx, q, args...).Scan(&n)
		return int(n), err
	}
	// Processed: every labeled sample is in ClickHouse.
	if err := waitFor(ctx, cfg.Timeout, 2*time.Second, out, "labeled samples", func() (string, bool) {
		n, err := count("SELECT count() FROM labeled_samples FINAL WHERE campaign_id = ?", cfg.Campaign)
		return fmt.Sprintf("%d/%d", n, a.Samples), err == nil && n >= a.Samples
	}); err != nil {
		return nil, err
	}
	// Consumed: the trainer's frontier is at the end of every partition
	// of the sample topic (hf_trainer_commit_lag 0), so every sample is
	// trained or held out; then its rows stop growing.
	client := &http.Client{Timeout: 30 * time.Second}
	var last, same int
	if err := waitFor(ctx, cfg.Timeout, 2*time.Second, out, "samples trained", func() (string, bool) {
		lag, err := commitLag(ctx, client, ep.MetricsURL)
		if err != nil {
			return err.Error(), false
		}
		n, err := count("SELECT toUInt64(sum(samples)) FROM trainer_steps FINAL WHERE trainer = 'hf-trainer'")
		if err != nil {
			return err.Error(), false
		}
		if n == last && n > 0 && lag == 0 {
			same++
		} else {
			last, same = n, 0
		}
		a.Trained = n
		return fmt.Sprintf("%d (trainer lag %d)", n, lag), same >= 3
	}); err != nil {
		return nil, err
	}
	// Published: the served checkpoint holds the last step (the trainer
	// checkpoints at most 30 s after its last step, then nothing changes;
	// scoring checks that one checkpoint answered every candidate).
	probe := trainer.Input{Update: "probe", Kind: "skill"}
	var version string
	var stable time.Time
	if err := waitFor(ctx, cfg.Timeout, 2*time.Second, out, "served checkpoint", func() (string, bool) {
		s, err := postScore(ctx, client, ep.TrainerURL, ep.ScoreToken, &probe)
		if err != nil {
			return err.Error(), false
		}
		if s.ModelVersion != version {
			version, stable = s.ModelVersion, time.Now()
		}
		a.ModelVersion, a.CheckpointSHA256, a.Warming = s.ModelVersion, s.CheckpointSHA256, s.Warming
		return s.ModelVersion, time.Since(stable) > cfg.Settle
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  trained %d of %d samples (the rest: the trainer's own held-out groups); serving %s (sha256 %.12s…, warming %v) after %s\n",
		a.Trained, a.Samples, a.ModelVersion, a.CheckpointSHA256, a.Warming, time.Since(t0).Round(time.Millisecond))

	// The campaigns the service never saw: their evidence and candidates.
	heldSims := cfg.sims(cfg.HeldoutSeeds, text)
	all, err := derive(ctx, heldSims, io.Discard)
	if err != nil {
		return nil, err
	}
	held, _ := eval.Clean(all)
	rounds, err := loopRounds(heldSims, held, cfg.K)
	if err != nil {
		return nil, err
	}
	// Pinned to the settled checkpoint: the trainer publishes a new one
	// whenever its frontier moved (a late or redelivered sample does),
	// and one checkpoint must score every candidate.
	scores, err := scoreAll(ctx, client, ep.TrainerURL+"?model_version="+url.QueryEscape(a.ModelVersion), ep.ScoreToken, rounds)
	if err != nil {
		return nil, err
	}
	a.Requests = len(scores)
	if s, err := postScore(ctx, client, ep.TrainerURL, ep.ScoreToken, &probe); err == nil && s.ModelVersion != a.ModelVersion {
		fmt.Fprintf(out, "  the trainer published %s while the candidates were scored (its frontier moved); every candidate was scored by the pinned %s\n",
			s.ModelVersion, a.ModelVersion)
	}
	for _, r := range rounds {
		for _, in := range append(append([]*trainer.Input(nil), r.inputs...), r.rewordings...) {
			if s := scores[in]; s.ModelVersion != a.ModelVersion {
				return nil, fmt.Errorf("candidate scored by %s, not the pinned %s", s.ModelVersion, a.ModelVersion)
			}
		}
	}
	by := func(f func(trainer.Score) float64) func([]*trainer.Input) []float64 {
		return func(ins []*trainer.Input) []float64 {
			v := make([]float64, len(ins))
			for i, in := range ins {
				v[i] = f(scores[in])
			}
			return v
		}
	}
	a.ByEffect = measureLoop(by(func(s trainer.Score) float64 { return s.Effect }), rounds, cfg.Resamples, cfg.Seed)
	a.ByReward = measureLoop(by(func(s trainer.Score) float64 { return s.Reward }), rounds, cfg.Resamples, cfg.Seed)
	a.ByEffect.SamplesTrained, a.ByReward.SamplesTrained = a.Trained, a.Trained
	a.ByEffect.Elapsed, a.ByReward.Elapsed = time.Since(t0), time.Since(t0)
	return a, nil
}

// commitLag sums the trainer's hf_trainer_commit_lag over partitions from
// the stack's /metrics (an error until the gauge is there).
func commitLag(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	total, seen := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "hf_trainer_commit_lag{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		total, seen = total+v, true
	}
	if !seen {
		return 0, errors.New("no hf_trainer_commit_lag yet")
	}
	return int(total), nil
}

// waitFor polls check every period until it reports done, printing its
// status when it changes; it fails after timeout.
func waitFor(ctx context.Context, timeout, period time.Duration, out io.Writer, what string, check func() (string, bool)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		status, done := check()
		if status != last {
			fmt.Fprintf(out, "  %s: %s\n", what, status)
			last = status
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %s (%s)", what, timeout, status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
	}
}

// postScore posts in to the trainer's /v1/score URL with the score token.
func postScore(ctx context.Context, c *http.Client, url, token string, in *trainer.Input) (trainer.Score, error) {
	var s trainer.Score
	body, err := json.Marshal(in)
	if err != nil {
		return s, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return s, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("/v1/score: %s: %.200s", resp.Status, b)
	}
	return s, json.Unmarshal(b, &s)
}

// scoreAll posts every candidate (both wordings) once, four at a time.
func scoreAll(ctx context.Context, c *http.Client, url, token string, rounds []round) (map[*trainer.Input]trainer.Score, error) {
	var ins []*trainer.Input
	for _, r := range rounds {
		ins = append(ins, r.inputs...)
		ins = append(ins, r.rewordings...)
	}
	out := make(map[*trainer.Input]trainer.Score, len(ins))
	var mu sync.Mutex
	var firstErr error
	work := make(chan *trainer.Input)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for in := range work {
				s, err := postScore(ctx, c, url, token, in)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				out[in] = s
				mu.Unlock()
			}
		}()
	}
	for _, in := range ins {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		work <- in
	}
	close(work)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return out, firstErr
}

// GoalServiceShare: through the service, picking by the default reward
// gains at least this share of the oracle's gain (issue 36).
const GoalServiceShare = 0.6

// writeServiceSummary prints an arm's figures against the loop's goal.
func writeServiceSummary(w io.Writer, a *ServiceArm) {
	for _, x := range []struct {
		name string
		p    LoopPoint
	}{{"by effect", a.ByEffect}, {"by reward", a.ByReward}} {
		p := x.p
		fmt.Fprintf(w, "  pick %s: picked − random %+.2f pp [%+.2f, %+.2f] (p %.3g) over %d cells; reworded %+.2f pp [%+.2f, %+.2f]; oracle %+.2f pp\n",
			x.name, p.Gain.Point, p.Gain.Lo, p.Gain.Hi, p.P, p.Cells, p.Reworded.Point, p.Reworded.Lo, p.Reworded.Hi, p.Oracle)
	}
	p := a.ByEffect
	if a.TextSignal {
		fmt.Fprintf(w, "service loop goal (text on, pick by effect): gain ≥ %.0f pp with p < %.2f over ≥ %d cells: %s (%d /v1/score requests to %s)\n",
			GoalLoopGainPP, GoalLoopP, GoalLoopCells, map[bool]string{true: "met", false: "NOT met"}[p.GoalMet()], a.Requests, a.ModelVersion)
		r := a.ByReward
		met := r.Gain.Point >= GoalServiceShare*r.Oracle && r.Gain.Lo > 0 && !a.Warming
		fmt.Fprintf(w, "service loop goal (text on, pick by the default reward, a pinned version): gain %+.2f pp ≥ %.0f %% of the oracle's %+.2f pp (%.0f %%), warming cleared (%v): %s\n\n",
			r.Gain.Point, 100*GoalServiceShare, r.Oracle, 100*share(r.Gain.Point, r.Oracle), !a.Warming, map[bool]string{true: "met", false: "NOT met"}[met])
	} else {
		fmt.Fprintf(w, "service loop goal (text off, the control): no gain: %s (%d /v1/score requests to %s)\n\n",
			map[bool]string{true: "met", false: "NOT met (the control shows a gain)"}[!(p.Gain.Lo > 0)], a.Requests, a.ModelVersion)
	}
}
