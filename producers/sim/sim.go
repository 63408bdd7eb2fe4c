// Package sim generates a full, deterministic cross-evaluation campaign (agents
// × evolvers × benchmarks, with baselines) as harnessflow events, from a
// generative model calibrated to docs/metrics.md's facts: flat harness-updating
// across evolver tiers, non-monotonic harness-benefit, weak agents' activation
// and adherence failures, round-to-round noise, occasional negative updates,
// retries.
//
// Generate is a pure function of its Config: the same Config yields the same
// events, in the same order, with the same ids and event times (derived from a
// fixed epoch and the seed, never the wall clock). Run streams them to an
// Emitter with a progress bar; Expected recomputes docs/metrics.md's figures from
// the events with plain, direct code, as ground truth for end-to-end tests.
package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// Source is the envelope source of every generated event.
const Source = "sim"

// Epoch is the event time of the first event of seed 0; seed s starts s days
// later.
var Epoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// Config configures a simulated campaign. Zero fields take the defaults.
type Config struct {
	// Campaign is the campaign id; cell ids are prefixed with it. Default: "demo".
	Campaign string
	// Project is the envelope's project. Default: "default".
	Project string
	// Scale is the number of tasks per cell. Default: 20.
	Scale int
	// BatchSize is the number of tasks per round; the number of rounds is
	// ceil(Scale/BatchSize). Default: 5.
	BatchSize int
	// Seed seeds every random draw and is the cells' seed. Default: 1.
	Seed int64
	// Benchmarks to run. Default: DefaultBenchmarks (swe, mcp, sb).
	Benchmarks []string
	// Agents to run. Default: DefaultAgents (six).
	Agents []string
	// Evolvers to run, besides the baseline. Default: DefaultEvolvers (seven).
	Evolvers []string
	// AnchorAgents of the campaign (Δupdate's mean). Default: DefaultAnchors.
	AnchorAgents []string
	// AnchorEvolvers of the campaign (Δbenefit's max). Default: DefaultAnchors.
	AnchorEvolvers []string
	// LabelEpsilon and LabelAlpha are declared with the campaign.
	// Default: 0.02 and 0.05.
	LabelEpsilon, LabelAlpha float64
	// TextSignal makes each skill's text show the content that sets the
	// update's effect (content.go). Off, the text is rendered from a second,
	// independent draw of content, so it explains nothing of the effect,
	// while effects keep the same distribution (the control). Default: true.
	TextSignal *bool
	// HeldOutWording renders every skill with the held-out phrasings,
	// headings and list markers only (wording.go), never used otherwise: a
	// campaign to test whether a model trained on ordinary wording
	// generalises. Default: false.
	HeldOutWording bool
	// ContentShare is the share of the variance of an update's relative
	// effect that its content sets (content.go; the rest is the round's
	// noise no text shows), in (0, 1). A hand-set assumption, not a
	// measured one (docs/metrics.md, "The simulator's assumptions"), so
	// bench critic-offline reports its goals at several. Default:
	// DefaultContentShare.
	ContentShare float64
}

// Bool returns a pointer to v, for Config.TextSignal.
func Bool(v bool) *bool { return &v }

// textSignal is TextSignal's value, true when unset.
func (c Config) textSignal() bool { return c.TextSignal == nil || *c.TextSignal }

// DefaultConfig is the configuration filled in for the fields left zero:
// the campaign `harnessflow simulate` sends without flags.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Campaign == "" {
		c.Campaign = "demo"
	}
	if c.Project == "" {
		c.Project = schemas.DefaultProject
	}
	if c.Scale == 0 {
		c.Scale = 20
	}
	if c.BatchSize == 0 {
		c.BatchSize = 5
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Benchmarks == nil {
		c.Benchmarks = slices.Clone(DefaultBenchmarks)
	}
	if c.Agents == nil {
		c.Agents = slices.Clone(DefaultAgents)
	}
	if c.Evolvers == nil {
		c.Evolvers = slices.Clone(DefaultEvolvers)
	}
	if c.AnchorAgents == nil {
		c.AnchorAgents = slices.Clone(DefaultAnchors)
	}
	if c.AnchorEvolvers == nil {
		c.AnchorEvolvers = slices.Clone(DefaultAnchors)
	}
	if c.LabelEpsilon == 0 {
		c.LabelEpsilon = 0.02
	}
	if c.LabelAlpha == 0 {
		c.LabelAlpha = 0.05
	}
	if c.TextSignal == nil {
		c.TextSignal = Bool(true)
	}
	if c.ContentShare == 0 {
		c.ContentShare = DefaultContentShare
	}
}

// Validate reports every problem of the configuration (after defaults), joined;
// each wraps ErrConfig, ErrUnknownModel or ErrUnknownBenchmark.
func (c *Config) Validate() error {
	var errs []error
	if c.ContentShare != 0 && !(c.ContentShare > 0 && c.ContentShare < 1) { // 0: the default
		errs = append(errs, fmt.Errorf("%w: content share %v: want (0, 1)", ErrConfig, c.ContentShare))
	}
	if c.Scale < 1 {
		errs = append(errs, fmt.Errorf("%w: scale %d: must be at least 1", ErrConfig, c.Scale))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("%w: batch size %d: must be at least 1", ErrConfig, c.BatchSize))
	}
	if c.Seed < 0 || c.Seed > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("%w: seed %d: must be in [1, 2^31)", ErrConfig, c.Seed))
	}
	if len(c.Benchmarks) == 0 || len(c.Agents) == 0 {
		errs = append(errs, fmt.Errorf("%w: need at least one benchmark and one agent", ErrConfig))
	}
	for _, b := range c.Benchmarks {
		if _, ok := benchmarkBenefit[b]; !ok {
			errs = append(errs, fmt.Errorf("%w: %q (want swe, mcp or sb)", ErrUnknownBenchmark, b))
		}
	}
	for _, a := range append(slices.Clone(c.Agents), c.AnchorAgents...) {
		if _, ok := agents[a]; !ok {
			errs = append(errs, fmt.Errorf("%w: agent %q", ErrUnknownModel, a))
		}
	}
	for _, e := range append(slices.Clone(c.Evolvers), c.AnchorEvolvers...) {
		if _, ok := evolverStyle[e]; !ok {
			errs = append(errs, fmt.Errorf("%w: evolver %q", ErrUnknownModel, e))
		}
	}
	if hasDup(c.Benchmarks) || hasDup(c.Agents) || hasDup(c.Evolvers) {
		errs = append(errs, fmt.Errorf("%w: benchmarks, agents and evolvers must not repeat", ErrConfig))
	}
	return errors.Join(errs...)
}

func hasDup(s []string) bool {
	seen := map[string]bool{}
	for _, v := range s {
		if seen[v] {
			return true
		}
		seen[v] = true
	}
	return false
}

// Rounds returns the number of rounds (cycles) per cell: ceil(Scale/BatchSize).
func (c Config) Rounds() int {
	c.setDefaults()
	return (c.Scale + c.BatchSize - 1) / c.BatchSize
}

// Cells returns the number of cells of the campaign: per benchmark and agent,
// one baseline and one cell per evolver.
func (c Config) Cells() int {
	c.setDefaults()
	return len(c.Benchmarks) * len(c.Agents) * (1 + len(c.Evolvers))
}

// CellID returns the id of the cell of (benchmark, agent, evolver) in the
// campaign; evolver "" is the baseline. It follows A-Evolve's directory names
// (<agent>_x_<evolver|none>_<bm>_s<seed>), prefixed with the campaign.
func (c Config) CellID(benchmark, agent, evolver string) string {
	c.setDefaults()
	e := evolver
	if e == "" {
		e = "none"
	}
	return fmt.Sprintf("%s/%s_x_%s_%s_s%d", c.Campaign, agent, e, benchmark, c.Seed)
}

// Generate produces the campaign's events, in order, to emit: one
// campaign_declared, then per benchmark and agent the baseline cell and one
// cell per evolver, each cell_started, its rounds (task_attempt with their
// skill_event and adherence_judgment, then the round's harness_update) and
// cell_finished. Event ids are schemas.DeriveEventID's. It stops at the first
// error emit returns and returns it. Generate is safe for concurrent use.
func Generate(cfg Config, emit func(schemas.Event) error) error {
	return generate(cfg, emit, nil)
}

// generate is Generate with a trace of every update's latent draw.
func generate(cfg Config, emit func(schemas.Event) error, trace func(updateTrace)) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	g := &gen{cfg: cfg, emit: emit, clock: Epoch.Add(time.Duration(cfg.Seed) * 24 * time.Hour), trace: trace}
	if err := g.out(&schemas.CampaignDeclared{
		CampaignID:     cfg.Campaign,
		Benchmarks:     slices.Clone(cfg.Benchmarks),
		AnchorAgents:   slices.Clone(cfg.AnchorAgents),
		AnchorEvolvers: slices.Clone(cfg.AnchorEvolvers),
		LabelEpsilon:   cfg.LabelEpsilon,
		LabelAlpha:     cfg.LabelAlpha,
	}); err != nil {
		return err
	}
	for _, bm := range cfg.Benchmarks {
		tasks := taskIDs(bm, cfg.Seed, cfg.Scale)
		for _, agent := range cfg.Agents {
			if err := g.cell(bm, agent, "", tasks); err != nil {
				return err
			}
			for _, ev := range cfg.Evolvers {
				if err := g.cell(bm, agent, ev, tasks); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type gen struct {
	cfg   Config
	emit  func(schemas.Event) error
	clock time.Time
	// trace, when set (tests), sees every update's latent draw.
	trace func(updateTrace)
}

// updateTrace is an update's latent draw in its context, for tests.
type updateTrace struct {
	cellID, bm, agent, evolver string
	cycle                      int
	draw                       updateDraw
	// meanInc is the cell's mean increment: the update's true effect on
	// the success probability is meanInc × draw.mult.
	meanInc float64
}

// out fills the envelope (time advances 250 ms per event) and emits.
func (g *gen) out(ev schemas.Event) error {
	h := ev.Header()
	h.Project = g.cfg.Project
	h.Source = Source
	h.EventTime = g.clock
	g.clock = g.clock.Add(250 * time.Millisecond)
	h.EventID = schemas.DeriveEventID(ev)
	return g.emit(ev)
}

// rng returns a generator seeded from the campaign seed and parts.
func rng(seed int64, parts ...string) *rand.Rand {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	s := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(s[:8]), binary.LittleEndian.Uint64(s[8:16])))
}

// taskIDs is the benchmark's task stream for a seed: the same in every cell.
func taskIDs(bm string, seed int64, n int) []string {
	r := rng(seed, "tasks", bm)
	ids := make([]string, 0, n)
	seen := map[string]bool{}
	for len(ids) < n {
		var id string
		switch bm {
		case BenchSWE:
			repo := sweRepos[r.IntN(len(sweRepos))]
			id = fmt.Sprintf("%s-%d", repo, 10000+r.IntN(20000))
		case BenchMCP:
			id = fmt.Sprintf("mcp-atlas-%04d", r.IntN(10000))
		default:
			id = fmt.Sprintf("%s-%03d", sbCategories[r.IntN(len(sbCategories))], r.IntN(1000))
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

func clamp(x, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, x)) }

func version(n int) string { return fmt.Sprintf("evo-%d", n) }

// cell generates one cell's events.
func (g *gen) cell(bm, agent, evolver string, tasks []string) error {
	cfg := g.cfg
	am := agents[agent]
	cellID := cfg.CellID(bm, agent, evolver)
	r := rng(cfg.Seed, "cell", cellID)
	rounds := cfg.Rounds()
	route := schemas.RouteBaseline
	if evolver != "" {
		route = schemas.RouteInSitu
	}
	maxAtt := maxAttempts[bm]
	if err := g.out(&schemas.CellStarted{
		CampaignID: cfg.Campaign, CellID: cellID, Benchmark: bm, AgentModel: agent,
		EvolverModel: evolver, Seed: int32(cfg.Seed), Route: route, H0Version: version(0),
		BatchSize: int32(cfg.BatchSize), MaxAttempts: maxAtt, TaskCount: int32(len(tasks)),
	}); err != nil {
		return err
	}
	// The harness: skills written so far (name -> spec) and the gain its
	// updates have accumulated (probability points when a skill is loaded).
	// An update's increment is the mean increment times its relative effect,
	// set by its content's latent quality in this context plus round noise
	// (content.go).
	pool := skillPools[bm]
	var skills []string
	gain := 0.0
	meanInc := 0.0
	if evolver != "" {
		meanInc = meanIncrement(cfg, bm, agent)
	}
	var attempts int64
	for cycle := 1; cycle <= rounds; cycle++ {
		lo, hi := (cycle-1)*cfg.BatchSize, min(cycle*cfg.BatchSize, len(tasks))
		shift := r.NormFloat64() * roundNoise
		hv := version(0)
		if evolver != "" {
			hv = version(cycle - 1)
		}
		var failed []string
		for idx := lo; idx < hi; idx++ {
			n, ok, err := g.task(r, cellID, bm, agent, am, tasks[idx], idx, cycle, hv, skills, gain, shift, maxAtt)
			if err != nil {
				return err
			}
			attempts += n
			if !ok {
				failed = append(failed, tasks[idx])
			}
		}
		// The evolver's update after this round; the last round's update would
		// never be used by a task, so the stream ends with the last round.
		if evolver == "" || cycle == rounds {
			continue
		}
		d := drawUpdate(cfg.Seed, cellID, cycle, bm, agent, evolver, cfg.textSignal(), cfg.ContentShare)
		gain += meanInc * d.mult
		if g.trace != nil {
			g.trace(updateTrace{cellID: cellID, bm: bm, agent: agent, evolver: evolver, cycle: cycle, draw: d, meanInc: meanInc})
		}
		u := g.update(r, cellID, bm, evolver, cycle, pool, &skills, tasks[lo:hi], failed, d.shown)
		if err := g.out(u); err != nil {
			return err
		}
	}
	return g.out(&schemas.CellFinished{CellID: cellID, Status: schemas.CellCompleted, Attempts: attempts})
}

// task generates one task's attempts (with skill events and judgments); it
// returns the number of attempts and whether the task was solved.
func (g *gen) task(r *rand.Rand, cellID, bm, agent string, am agentModel, taskID string, idx, cycle int,
	hv string, skills []string, gain, shift float64, maxAtt int32) (int64, bool, error) {
	// The task's latent difficulty, shared by all the agent's cells on this
	// stream (so evolved cells pair with the baseline), sometimes redrawn.
	latent := rng(g.cfg.Seed, "latent", bm, agent, taskID).Float64()
	if r.Float64() < taskReroll {
		latent = r.Float64()
	}
	judged := false
	for att := int32(1); att <= maxAtt; att++ {
		ta := &schemas.TaskAttempt{
			CellID: cellID, TaskID: taskID, StreamIdx: int32(idx), Cycle: int32(cycle), Attempt: att,
			HarnessVersion: hv, Status: schemas.StatusOK, SkillsAvailable: int32(len(skills)),
			SkillsLoaded: []string{},
		}
		if att == 1 {
			ta.TaskInput = taskInput(bm, taskID)
		}
		// Skill activation.
		var evs []schemas.Event
		loaded := ""
		if len(skills) > 0 {
			turn := int32(1)
			evs = append(evs, &schemas.SkillEvent{CellID: cellID, TaskID: taskID, Attempt: att, Turn: turn,
				Tool: schemas.ToolListSkills, Status: schemas.SkillLoaded})
			if r.Float64() < am.slr {
				if r.Float64() < notFoundRate {
					turn++
					evs = append(evs, &schemas.SkillEvent{CellID: cellID, TaskID: taskID, Attempt: att, Turn: turn,
						Tool: schemas.ToolLoadSkill, SkillName: strings.ReplaceAll(skills[0], "-", "_"), Status: schemas.SkillNotFound})
				}
				loaded = skills[r.IntN(len(skills))]
				turn++
				evs = append(evs, &schemas.SkillEvent{CellID: cellID, TaskID: taskID, Attempt: att, Turn: turn,
					Tool: schemas.ToolLoadSkill, SkillName: loaded, Status: schemas.SkillLoaded})
				ta.SkillsLoaded = []string{loaded}
			} else if r.Float64() < am.multikey {
				turn++
				evs = append(evs, &schemas.SkillEvent{CellID: cellID, TaskID: taskID, Attempt: att, Turn: turn,
					Tool: schemas.ToolLoadSkill, SkillName: skills[r.IntN(len(skills))], Status: schemas.SkillRejectedMultikey})
			}
		}
		// Outcome.
		p := am.base[bm] + shift
		if loaded != "" {
			p += gain
		} else {
			p += gain * unloadedShare
		}
		if att > 1 {
			p *= 0.5 // a retry of a failed task is harder
		}
		p = clamp(p, 0.01, 0.99)
		u := latent
		if att > 1 {
			u = r.Float64()
		}
		success := u < p
		switch x := r.Float64(); {
		case x < errorRate:
			ta.Status, success = schemas.StatusError, false
		case x < errorRate+timeoutRate:
			ta.Status, success = schemas.StatusTimeout, false
		}
		ta.Success = success
		ta.Score = score(r, bm, success)
		if ta.Status != schemas.StatusOK {
			ta.Score = 0 // a failed run scores nothing
		}
		ta.Final = success || att == maxAtt
		ta.InputTokens = int64(8000 + r.IntN(40000))
		ta.OutputTokens = int64(500 + r.IntN(6000))
		ta.DurationMs = int64(20000 + r.IntN(400000))
		if err := g.out(ta); err != nil {
			return 0, false, err
		}
		for _, ev := range evs {
			if err := g.out(ev); err != nil {
				return 0, false, err
			}
		}
		// One judgment per task: the first attempt that loaded a skill.
		if loaded != "" && !judged {
			judged = true
			if err := g.out(judge(r, cellID, taskID, att, loaded, am)); err != nil {
				return 0, false, err
			}
		}
		if ta.Final {
			return int64(att), success, nil
		}
	}
	return int64(maxAtt), false, nil
}

// score draws the attempt's score: binary on SWE and SkillsBench, claim
// coverage on MCP (k of n claims; success iff coverage >= MCPSuccessScore).
func score(r *rand.Rand, bm string, success bool) float64 {
	if bm != BenchMCP {
		if success {
			return 1
		}
		return 0
	}
	n := 4 + r.IntN(5)
	need := int(math.Ceil(MCPSuccessScore * float64(n)))
	var k int
	if success {
		k = need + r.IntN(n-need+1)
	} else {
		k = r.IntN(need)
	}
	return float64(k) / float64(n)
}

// judge draws an adherence judgment for a loaded skill: phase scores decaying
// from the agent's adherence at load to its adherence at the final turn, and
// integer counts of followed and violated instructions.
func judge(r *rand.Rand, cellID, taskID string, att int32, skill string, am agentModel) *schemas.AdherenceJudgment {
	phase := func(i int) *float64 {
		v := clamp(am.adhStart+(am.adhEnd-am.adhStart)*float64(i)/4+r.NormFloat64()*phaseNoise, 0, 1)
		v = math.Round(v*1000) / 1000
		return &v
	}
	j := &schemas.AdherenceJudgment{CellID: cellID, TaskID: taskID, Attempt: att, SkillName: skill, JudgeModel: judgeModel,
		HarnessLoaded: phase(0), FirstAction: phase(1), Midpoint: phase(2), PreFinal: phase(3), FinalValidation: phase(4)}
	if r.Float64() < 0.05 {
		j.Midpoint = nil // the judge could not place a midpoint
	}
	mean := (am.adhStart + am.adhEnd) / 2
	n := 3 + r.IntN(6)
	for i := 0; i < n; i++ {
		if r.Float64() < mean {
			j.Followed++
			continue
		}
		switch r.IntN(3) {
		case 0:
			j.ViolatedCommission++
		case 1:
			j.ViolatedOmission++
		default:
			j.RequiredUnobserved++
		}
	}
	j.NotApplicable = int32(r.IntN(3))
	if r.Float64() < 0.2 {
		j.InsufficientEvidence = 1
	}
	return j
}

// update writes the evolver's update after a round: a new skill while the pool
// lasts, else a revision of an existing one; sometimes a system-prompt edit.
func (g *gen) update(r *rand.Rand, cellID, bm, evolver string, cycle int, pool []skillSpec, skills *[]string, batch, failed []string, c content) *schemas.HarnessUpdate {
	var arts []schemas.Artifact
	var spec skillSpec
	op := schemas.OpAdd
	if len(*skills) < len(pool) {
		spec = pool[len(*skills)]
		*skills = append(*skills, spec.name)
	} else {
		spec = pool[r.IntN(len(pool))]
		op = schemas.OpModify
	}
	arts = append(arts, artifact(schemas.KindSkill, spec.name, op, skillMD(spec, c, g.cfg, bm, evolver, cellID, cycle, batch, failed)))
	if r.Float64() < 0.3 {
		arts = append(arts, artifact(schemas.KindPrompt, "system.md", schemas.OpModify, fmt.Sprintf(
			"You are a careful software agent.\n\nBefore acting, list the skills with list_skills and load the one that fits the task with load_skill (one name per call).\n\n<!-- revision %d by %s for %s -->\n", cycle, evolver, cellID)))
	}
	summary := fmt.Sprintf("Round %d: %d of %d tasks failed (%s). %s %s skill %q.", cycle, len(failed), len(batch),
		strings.Join(firstN(failed, 3), ", "), evolver, map[string]string{schemas.OpAdd: "added", schemas.OpModify: "revised"}[op], spec.name)
	return &schemas.HarnessUpdate{
		CellID: cellID, UpdateID: fmt.Sprintf("%s#u%d", cellID, cycle), Cycle: int32(cycle),
		FromVersion: version(cycle - 1), ToVersion: version(cycle), EvolverModel: evolver,
		Artifacts: arts, EvidenceTaskIDs: slices.Clone(batch), EvidenceSummary: summary, Accepted: true,
	}
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func artifact(kind, name, op, content string) schemas.Artifact {
	sum := sha256.Sum256([]byte(content))
	return schemas.Artifact{Kind: kind, Name: name, Op: op, Content: content, ContentSHA256: hex.EncodeToString(sum[:])}
}

// skillMD renders a SKILL.md: YAML front matter (name, description), then
// the markdown body rendered from the content with the campaign's wording
// (wording.go), then the round's pitfalls. The provenance line makes every
// revision's content unique.
func skillMD(s skillSpec, c content, cfg Config, bm, evolver, cellID string, cycle int, batch, failed []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\nname: %s\ndescription: %q\n---\n\n", s.name, s.description)
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", strings.ReplaceAll(s.name, "-", " "), s.description)
	b.WriteString(body(rng(cfg.Seed, "wording", cellID, fmt.Sprint(cycle)), c, bm, cfg.HeldOutWording))
	fmt.Fprintf(&b, "## Pitfalls seen\n\nSeen on: %s.\n\n", strings.Join(firstN(batch, 2), ", "))
	if len(failed) == 0 {
		b.WriteString("- None in the last round; keep the steps short.\n")
	}
	for _, t := range firstN(failed, 3) {
		fmt.Fprintf(&b, "- %s failed: the agent skipped a step above.\n", t)
	}
	fmt.Fprintf(&b, "\n<!-- written by %s after round %d of %s -->\n", evolver, cycle, cellID)
	return b.String()
}

func taskInput(bm, taskID string) string {
	switch bm {
	case BenchSWE:
		return "Resolve the GitHub issue of " + taskID + ": make the failing tests pass without breaking others."
	case BenchMCP:
		return "Answer the request of " + taskID + " using the available MCP tools; every claim must be supported."
	}
	return "Complete the SkillsBench task " + taskID + " and write the requested output file."
}
