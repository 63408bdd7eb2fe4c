// Package gen generates small, realistic and deterministic campaigns for the
// processor's tests and benchmarks: one campaign_declared, then per agent a
// baseline cell and a few evolver cells that run the same task stream round by
// round, with attempts, skill events, adherence judgments, harness updates
// (valid SKILL.md front matter, evidence, chained versions) and cell_finished.
//
// The same Config (Seed included) always yields the same events, the same
// event ids and the same message timestamps, so encoded raw logs are
// byte-identical across runs.
package gen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// Config sizes a generated campaign.
type Config struct {
	// Seed drives every random choice. Default: 1.
	Seed int64
	// Project is the tenant. Default: "proj".
	Project string
	// Campaign is the campaign id. Default: "camp-<Seed>".
	Campaign string
	// Agents is the number of agent models (one pairing key each). Default: 1.
	Agents int
	// Evolvers is the number of evolved cells per agent (besides the
	// baseline). Default: 2.
	Evolvers int
	// Rounds is the number of cycles per cell. Default: 3.
	Rounds int
	// TasksPerRound is the batch size. Default: 6.
	TasksPerRound int
	// Start is the time of the first event. Default: 2026-01-01T00:00:00Z.
	Start time.Time
	// Step separates consecutive events of the campaign. Default: 1ms.
	Step time.Duration
}

func (c *Config) setDefaults() {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Project == "" {
		c.Project = "proj"
	}
	if c.Campaign == "" {
		c.Campaign = fmt.Sprintf("camp-%d", c.Seed)
	}
	if c.Agents == 0 {
		c.Agents = 1
	}
	if c.Evolvers == 0 {
		c.Evolvers = 2
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.TasksPerRound == 0 {
		c.TasksPerRound = 6
	}
	if c.Start.IsZero() {
		c.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if c.Step == 0 {
		c.Step = time.Millisecond
	}
}

// Record is one generated event with its topic and timestamp.
type Record struct {
	Topic string
	Time  time.Time
	Event schemas.Event
}

// Campaign is a generated campaign.
type Campaign struct {
	// Config is the effective configuration (defaults filled in).
	Config Config
	// Records are every event in production order (timestamps ascending).
	Records []Record
	// Cells are the cell ids, in creation order.
	Cells []string
}

// SkillContent returns a SKILL.md with valid front matter.
func SkillContent(name, body string) string {
	return "---\nname: " + name + "\ndescription: " + "How to " + body + "\n---\n# " + name + "\n\n" + body + "\n"
}

// SHA256 is the hex sha256 of s (an artifact's content_sha256).
func SHA256(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

type cellPlan struct {
	id, agent, evolver string
	events             []Record // in the cell's own order, times filled later
}

// Generate builds a campaign. Cells run concurrently: their events are
// interleaved round-robin, each cell keeping its own order.
func Generate(cfg Config) *Campaign {
	cfg.setDefaults()
	rng := rand.New(rand.NewSource(cfg.Seed))
	env := func(id string) schemas.Envelope {
		return schemas.Envelope{EventID: id, Project: cfg.Project, Source: "gen"}
	}
	out := &Campaign{Config: cfg}
	var anchorsA, anchorsE []string
	for a := 0; a < cfg.Agents; a++ {
		anchorsA = append(anchorsA, fmt.Sprintf("agent-%d", a))
	}
	for e := 0; e < cfg.Evolvers; e++ {
		anchorsE = append(anchorsE, fmt.Sprintf("evolver-%d", e))
	}
	camp := &schemas.CampaignDeclared{
		Envelope: env(cfg.Campaign + ":declared"), CampaignID: cfg.Campaign,
		Benchmarks: []string{"swe"}, AnchorAgents: anchorsA, AnchorEvolvers: anchorsE,
		LabelEpsilon: 0.02, LabelAlpha: 0.05,
	}
	var plans []*cellPlan
	for a := 0; a < cfg.Agents; a++ {
		agent := anchorsA[a]
		skill := 0.3 + 0.4*rng.Float64() // the agent's base success rate
		for e := -1; e < cfg.Evolvers; e++ {
			evolver, route := "", schemas.RouteBaseline
			id := fmt.Sprintf("%s-%s-base", cfg.Campaign, agent)
			gain := 0.0
			if e >= 0 {
				evolver, route = anchorsE[e], schemas.RouteInSitu
				id = fmt.Sprintf("%s-%s-%s", cfg.Campaign, agent, evolver)
				gain = 0.05 + 0.1*rng.Float64()
			}
			plans = append(plans, planCell(rng, cfg, env, id, agent, evolver, route, skill, gain))
		}
	}
	t := cfg.Start
	out.Records = append(out.Records, Record{Topic: schemas.TopicCampaigns, Time: t, Event: camp})
	camp.EventTime = t
	// Interleave the cells round-robin.
	idx := make([]int, len(plans))
	for left := true; left; {
		left = false
		for i, p := range plans {
			if idx[i] >= len(p.events) {
				continue
			}
			left = true
			t = t.Add(cfg.Step)
			r := p.events[idx[i]]
			r.Time = t
			r.Event.Header().EventTime = t
			out.Records = append(out.Records, r)
			idx[i]++
		}
	}
	for _, p := range plans {
		out.Cells = append(out.Cells, p.id)
	}
	return out
}

func planCell(rng *rand.Rand, cfg Config, env func(string) schemas.Envelope, id, agent, evolver, route string, skill, gain float64) *cellPlan {
	p := &cellPlan{id: id, agent: agent, evolver: evolver}
	add := func(ev schemas.Event) {
		p.events = append(p.events, Record{Topic: schemas.TopicFor(ev.Type()), Event: ev})
	}
	add(&schemas.CellStarted{
		Envelope: env(id + ":started"), CampaignID: cfg.Campaign, CellID: id, Benchmark: "swe",
		AgentModel: agent, EvolverModel: evolver, Seed: int32(cfg.Seed), Route: route, H0Version: "h0",
		BatchSize: int32(cfg.TasksPerRound), MaxAttempts: 2, TaskCount: int32(cfg.Rounds * cfg.TasksPerRound),
	})
	version := "h0"
	var attempts int64
	skills := 0
	for c := 1; c <= cfg.Rounds; c++ {
		var taskIDs []string
		for i := 0; i < cfg.TasksPerRound; i++ {
			task := fmt.Sprintf("task-%03d", (c-1)*cfg.TasksPerRound+i)
			taskIDs = append(taskIDs, task)
			// Deterministic per (task, cell): the task's difficulty is shared
			// by every cell of the agent, the cell adds its gain per round.
			r := rng.Float64()
			pSuccess := skill + gain*float64(c-1)
			success := r < pSuccess
			score := 0.0
			if success {
				score = 1
			}
			var loaded []string
			if skills > 0 && rng.Float64() < 0.7 {
				loaded = []string{fmt.Sprintf("skill-%d", skills)}
			}
			attempts++
			add(&schemas.TaskAttempt{
				Envelope: env(fmt.Sprintf("%s:attempt:%s:1", id, task)), CellID: id, TaskID: task,
				StreamIdx: int32((c-1)*cfg.TasksPerRound + i), Cycle: int32(c), Attempt: 1, HarnessVersion: version,
				Status: schemas.StatusOK, Score: score, Success: success, Final: true, SkillsAvailable: int32(skills),
				SkillsLoaded: loaded, InputTokens: 1000 + rng.Int63n(500), OutputTokens: 200 + rng.Int63n(100),
				DurationMs: 1000 + rng.Int63n(5000),
			})
			if len(loaded) > 0 {
				add(&schemas.SkillEvent{
					Envelope: env(fmt.Sprintf("%s:skill:%s:1:1", id, task)), CellID: id, TaskID: task, Attempt: 1,
					Turn: 1, Tool: schemas.ToolLoadSkill, SkillName: loaded[0], Status: schemas.SkillLoaded,
				})
				h, f := 0.6+0.3*rng.Float64(), 0.3+0.5*rng.Float64()
				add(&schemas.AdherenceJudgment{
					Envelope: env(fmt.Sprintf("%s:judgment:%s:1:%s", id, task, loaded[0])), CellID: id, TaskID: task,
					Attempt: 1, SkillName: loaded[0], JudgeModel: "judge", Followed: int32(1 + rng.Intn(4)),
					ViolatedCommission: int32(rng.Intn(2)), ViolatedOmission: int32(rng.Intn(2)),
					HarnessLoaded: &h, FinalValidation: &f,
				})
			}
		}
		if evolver != "" {
			skills++
			next := fmt.Sprintf("h%d", c)
			name := fmt.Sprintf("skill-%d", skills)
			content := SkillContent(name, fmt.Sprintf("handle round %d of %s for %s", c, id, agent))
			add(&schemas.HarnessUpdate{
				Envelope: env(fmt.Sprintf("%s:update:%d", id, c)), CellID: id, UpdateID: fmt.Sprintf("%s-u%d", id, c),
				Cycle: int32(c), FromVersion: version, ToVersion: next, EvolverModel: evolver,
				Artifacts: []schemas.Artifact{{Kind: schemas.KindSkill, Name: name, Op: schemas.OpAdd,
					Content: content, ContentSHA256: SHA256(content)}},
				EvidenceTaskIDs: taskIDs, EvidenceSummary: fmt.Sprintf("round %d failures", c), Accepted: true,
			})
			version = next
		}
	}
	add(&schemas.CellFinished{Envelope: env(id + ":finished"), CellID: id, Status: schemas.CellCompleted, Attempts: attempts})
	return p
}

// Messages encodes the records as Kafka messages (value = schemas.Encode,
// key = the event's partition key, time = the record's time), grouped by
// topic in production order.
func (c *Campaign) Messages() (map[string][]kafka.Message, error) {
	out := map[string][]kafka.Message{}
	for _, r := range c.Records {
		b, err := schemas.Encode(r.Event)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", r.Event.Type(), r.Event.Header().EventID, err)
		}
		out[r.Topic] = append(out[r.Topic], kafka.Message{Key: []byte(r.Event.PartitionKey()), Value: b, Time: r.Time})
	}
	return out, nil
}

// Topics returns the topics of Messages in a fixed order.
func Topics(m map[string][]kafka.Message) []string {
	var ts []string
	for t := range m {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}
