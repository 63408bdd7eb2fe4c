package sim

// The generative model's calibration (docs/metrics.md, "Calibration facts"). Every
// figure is a parameter of the generator, not a promise about one run's output:
// a run draws tasks, rounds and noise around them.

// Benchmarks of the paper: SWE-bench Verified (binary), MCP-Atlas (claim
// coverage in [0,1], success at score >= MCPSuccessScore) and SkillsBench
// (binary, retried).
const (
	BenchSWE = "swe"
	BenchMCP = "mcp"
	BenchSB  = "sb"
)

// MCPSuccessScore is the claim coverage at which an MCP-Atlas task counts as
// solved (the A-Evolve code's threshold).
const MCPSuccessScore = 0.75

// DefaultAgents, DefaultEvolvers and DefaultAnchors are the paper's model
// nicknames: six agents, seven evolvers, three anchors (used as anchor agents
// and anchor evolvers alike).
var (
	DefaultBenchmarks = []string{BenchSWE, BenchMCP, BenchSB}
	DefaultAgents     = []string{"opus46", "sonnet46", "haiku45", "qwen235b", "qwen32b", "qwen35_9b"}
	DefaultEvolvers   = []string{"opus46", "sonnet46", "haiku45", "qwen235b", "qwen32b", "qwen35_9b", "gptoss120b"}
	DefaultAnchors    = []string{"opus46", "sonnet46", "qwen235b"}
)

// agentModel is one agent's calibration.
type agentModel struct {
	// base pass probability per benchmark (baseline, first attempt).
	base map[string]float64
	// benefit is the gain (probability points) a fully evolved harness gives
	// on SWE when a skill is loaded; other benchmarks scale it. Non-monotonic
	// in base capability: mid-tier agents gain most.
	benefit float64
	// slr is the probability that an attempt offered skills loads one.
	slr float64
	// multikey is the probability that a non-loading attempt tries a bundled
	// (rejected) load instead of none.
	multikey float64
	// adhStart, adhEnd: judged adherence at load and at the final turn.
	adhStart, adhEnd float64
}

var agents = map[string]agentModel{
	"opus46":    {base: map[string]float64{BenchSWE: 0.78, BenchMCP: 0.62, BenchSB: 0.44}, benefit: 0.040, slr: 0.96, multikey: 0.1, adhStart: 0.89, adhEnd: 0.80},
	"sonnet46":  {base: map[string]float64{BenchSWE: 0.74, BenchMCP: 0.58, BenchSB: 0.40}, benefit: 0.050, slr: 0.94, multikey: 0.1, adhStart: 0.87, adhEnd: 0.76},
	"haiku45":   {base: map[string]float64{BenchSWE: 0.48, BenchMCP: 0.40, BenchSB: 0.27}, benefit: 0.110, slr: 0.80, multikey: 0.2, adhStart: 0.78, adhEnd: 0.58},
	"qwen235b":  {base: map[string]float64{BenchSWE: 0.207, BenchMCP: 0.30, BenchSB: 0.18}, benefit: 0.250, slr: 0.72, multikey: 0.3, adhStart: 0.74, adhEnd: 0.50},
	"qwen32b":   {base: map[string]float64{BenchSWE: 0.14, BenchMCP: 0.18, BenchSB: 0.10}, benefit: 0.080, slr: 0.40, multikey: 0.5, adhStart: 0.60, adhEnd: 0.26},
	"qwen35_9b": {base: map[string]float64{BenchSWE: 0.10, BenchMCP: 0.12, BenchSB: 0.07}, benefit: 0.040, slr: 0.25, multikey: 0.6, adhStart: 0.52, adhEnd: 0.13},
}

// Evolvers have no quality of their own: an update's effect comes from its
// content (content.go), and an evolver only tends to write some content more
// than others (evolverStyle), at the same expected quality, so Δupdate is
// flat across tiers and a 9B evolver is as useful as the largest.

// benchmarkBenefit scales an agent's benefit per benchmark.
var benchmarkBenefit = map[string]float64{BenchSWE: 1.0, BenchMCP: 0.6, BenchSB: 0.8}

// maxAttempts per benchmark: SkillsBench retries up to three times, the others twice.
var maxAttempts = map[string]int32{BenchSWE: 2, BenchMCP: 2, BenchSB: 3}

// Noise of the model.
const (
	// roundNoise is the stddev of a round's shift of the pass probability.
	roundNoise = 0.04
	// updateNoise is the stddev of one update's increment relative to its
	// mean (content quality and round noise together, content.go): above
	// 1/1.64 some updates are negative.
	updateNoise = 0.9
	// taskReroll is the probability that a task's latent difficulty in a cell
	// is redrawn instead of shared with the agent's other cells.
	taskReroll = 0.1
	// unloadedShare is the share of the harness gain an attempt gets without
	// loading a skill (the prompt part of the harness).
	unloadedShare = 0.2
	// errorRate and timeoutRate are attempt failures with status != ok.
	errorRate   = 0.015
	timeoutRate = 0.01
	// notFoundRate is the probability that a loading attempt first asks for a
	// skill that does not exist.
	notFoundRate = 0.08
	// phaseNoise is the stddev of one judged phase score.
	phaseNoise = 0.08
	// judgeModel names the adherence judge.
	judgeModel = "opus46-judge"
)

// skillPools are the skills an evolver writes per benchmark, in order; the
// content is generated around each (name, description, steps).
type skillSpec struct {
	name, description string
	steps             []string
}

var skillPools = map[string][]skillSpec{
	BenchSWE: {
		{"reproduce-before-patch", "Write a failing reproduction of the issue before editing any source file.",
			[]string{"Read the issue and locate the failing behaviour.", "Write a minimal script or test that fails.", "Patch, then rerun the reproduction."}},
		{"run-targeted-tests", "Run only the tests that exercise the changed module, before and after the patch.",
			[]string{"Find tests importing the module under change.", "Run them with -x to stop at the first failure.", "Compare before/after results."}},
		{"minimal-diff", "Keep patches small: change the fewest lines that fix the root cause.",
			[]string{"Identify the root cause, not the symptom.", "Avoid drive-by refactors.", "Re-read the diff before submitting."}},
		{"read-traceback-first", "Start from the innermost traceback frame that belongs to the repository.",
			[]string{"Skip frames in site-packages.", "Open the file at the reported line.", "Check the types of the values involved."}},
		{"check-edge-cases", "List empty, None and boundary inputs for the changed function and test them.",
			[]string{"Enumerate boundary inputs.", "Add one assertion per case.", "Keep the original behaviour for valid inputs."}},
	},
	BenchMCP: {
		{"enumerate-claims", "Split the request into checkable claims before calling any tool.",
			[]string{"List every fact the answer must contain.", "Map each claim to a tool.", "Tick claims off as tool results arrive."}},
		{"verify-tool-output", "Cross-check a tool's answer with a second tool when one exists.",
			[]string{"Call the primary tool.", "Call an independent tool for the same fact.", "Report disagreements explicitly."}},
		{"cite-sources", "Attach the tool call that supports each sentence of the answer.",
			[]string{"Keep a map from claim to tool call.", "Quote identifiers verbatim.", "Drop sentences without support."}},
		{"paginate-fully", "Follow pagination tokens until the listing is complete.",
			[]string{"Check every response for a next-page token.", "Stop only on an empty token.", "Deduplicate by id."}},
	},
	BenchSB: {
		{"check-task-constraints", "Extract every explicit constraint from the task statement into a checklist.",
			[]string{"Quote each constraint.", "Note the expected output format.", "Verify each item before finishing."}},
		{"validate-output-format", "Validate the output file against the requested format before finishing.",
			[]string{"Parse the output with a strict parser.", "Compare field names with the task.", "Fix and re-validate."}},
		{"use-provided-tools", "Prefer the tools shipped in the task's environment over ad-hoc scripts.",
			[]string{"List the environment's tools.", "Read their --help.", "Use them for the heavy lifting."}},
		{"test-incrementally", "Run the task's checks after every meaningful change.",
			[]string{"Locate the check command.", "Run it after each edit.", "Stop when all pass."}},
	},
}

// taskNames generate realistic task ids per benchmark.
var sweRepos = []string{"django__django", "sympy__sympy", "astropy__astropy", "matplotlib__matplotlib", "scikit-learn__scikit-learn", "pytest-dev__pytest", "sphinx-doc__sphinx", "pydata__xarray"}
var sbCategories = []string{"data-cleaning", "spreadsheet", "pdf-extract", "git-ops", "web-scrape", "image-proc"}
