package aevolve

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
)

// importAll imports cfg.Dir, checking every event as the SDK's Emit does
// first (schemas.Validate), and returns the events, the summary and the
// report; any error fails the test.
func importAll(t *testing.T, cfg Config) ([]schemas.Event, Summary, string) {
	t.Helper()
	var evs []schemas.Event
	var rep bytes.Buffer
	sum, err := Import(context.Background(), cfg, func(ev schemas.Event) error {
		if err := schemas.Validate(ev, schemas.DefaultLimits()); err != nil {
			return err
		}
		evs = append(evs, ev)
		return nil
	}, &rep)
	if err != nil {
		t.Fatalf("import %s: %v\n%s", cfg.Dir, err, rep.String())
	}
	return evs, sum, rep.String()
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestImportFixtures(t *testing.T) {
	t.Parallel()
	root := buildFixtures(t)
	evs, sum, rep := importAll(t, Config{Dir: root})
	t.Log(rep)
	if sum.Campaign != "paper-run" || len(sum.Cells) != 6 {
		t.Fatalf("campaign %q, %d cells", sum.Campaign, len(sum.Cells))
	}
	for _, ev := range evs {
		if err := schemas.Validate(ev, schemas.DefaultLimits()); err != nil {
			t.Fatalf("%s invalid: %v", ev.Type(), err)
		}
		if ev.Header().Source != Source || ev.Header().EventID == "" {
			t.Fatalf("envelope %+v", ev.Header())
		}
	}
	x := sim.Expected(evs)
	cells := map[string]struct {
		n           int
		pass, final float64
	}{
		"qwen235b_x_none_swe_s1":    {4, 25, 25},
		"qwen235b_x_qwen32b_swe_s1": {4, 75, 75},
		"sonnet46_x_none_mcp_s2":    {5, 40, 40},
		"sonnet46_x_opus46_mcp_s2":  {5, 60, 60},
		"haiku45_x_none_sb_s1":      {3, 100.0 / 3, 200.0 / 3},
		"haiku45_x_sonnet46_sb_s1":  {3, 200.0 / 3, 100},
	}
	for id, want := range cells {
		got, ok := x.Cells[id]
		if !ok || got.NTasks != want.n || !near(got.PassRate, want.pass) || !near(got.PassRateFinal, want.final) {
			t.Errorf("cell %s: %+v, want n=%d pass=%.2f final=%.2f", id, got, want.n, want.pass, want.final)
		}
	}
	// The interrupted (0.9) and error rows score 0: (0.8+0.5+0.75)/5.
	if got := x.Cells["sonnet46_x_none_mcp_s2"].MeanScore; !near(got, 41) {
		t.Errorf("mcp baseline mean score %v, want 41", got)
	}
	if d := x.Delta[sim.PairKey{Benchmark: "swe", Agent: "qwen235b", Evolver: "qwen32b", Seed: 1}]; !near(d, 50) {
		t.Errorf("swe Δ = %v, want 50", d)
	}
	if d := x.Delta[sim.PairKey{Benchmark: "sb", Agent: "haiku45", Evolver: "sonnet46", Seed: 1}]; !near(d, 100.0/3) {
		t.Errorf("sb Δ = %v", d)
	}
	if slr := x.Activation[sim.BenchAgent{Benchmark: "sb", Agent: "haiku45"}].SLR; slr == nil || !near(*slr, 2.0/3) {
		t.Errorf("sb SLR = %v, want 2/3", slr)
	}
	// Per-cell details.
	updates := map[string]*schemas.HarnessUpdate{}
	started := map[string]*schemas.CellStarted{}
	finished := map[string]bool{}
	skillsByStatus := map[string]int{}
	for _, ev := range evs {
		switch e := ev.(type) {
		case *schemas.HarnessUpdate:
			updates[e.UpdateID] = e
		case *schemas.CellStarted:
			started[e.CellID] = e
		case *schemas.CellFinished:
			finished[e.CellID] = true
		case *schemas.SkillEvent:
			skillsByStatus[e.Tool+"/"+e.Status]++
		case *schemas.TaskAttempt:
			if e.CellID == "qwen235b_x_qwen32b_swe_s1" {
				wantHV := map[int32]string{1: "evo-0", 2: "evo-1"}[e.Cycle]
				wantSk := map[int32]int32{1: 0, 2: 1}[e.Cycle]
				if e.HarnessVersion != wantHV || e.SkillsAvailable != wantSk {
					t.Errorf("%s cycle %d: harness %s skills %d", e.TaskID, e.Cycle, e.HarnessVersion, e.SkillsAvailable)
				}
			}
			if e.CellID == "qwen235b_x_none_swe_s1" && e.TaskID == "astropy__astropy-12907" && e.Status != schemas.StatusTimeout {
				t.Errorf("docker timeout row has status %s", e.Status)
			}
		}
	}
	if len(updates) != 4 {
		t.Fatalf("%d updates, want 4 (swe evo-1, evo-2; sb evo-1, evo-2; evo-3 is empty)", len(updates))
	}
	u := updates["qwen235b_x_qwen32b_swe_s1/evo-2"]
	if u == nil || u.ToVersion != "evo-2" || u.FromVersion != "evo-1" || len(u.Artifacts) != 4 || u.EvolverModel != "qwen32b" {
		t.Fatalf("swe evo-2 update: %+v", u)
	}
	kinds := map[string]string{}
	for _, a := range u.Artifacts {
		kinds[a.Kind+":"+a.Name] = a.Op
	}
	if kinds["prompt:system.md"] != "modify" || kinds["memory:lessons.jsonl"] != "add" || kinds["skill:reproduce-first"] != "modify" || kinds["skill:minimal-diff"] != "add" {
		t.Fatalf("artifacts %v", kinds)
	}
	if strings.Join(u.EvidenceTaskIDs, ",") != "astropy__astropy-12907,pytest-dev__pytest-5103" || !strings.Contains(updates["qwen235b_x_qwen32b_swe_s1/evo-1"].EvidenceSummary, "score improved") {
		t.Fatalf("evidence %v / %q", u.EvidenceTaskIDs, updates["qwen235b_x_qwen32b_swe_s1/evo-1"].EvidenceSummary)
	}
	sbu := updates["haiku45_x_sonnet46_sb_s1/evo-2"]
	ops := map[string]string{}
	for _, a := range sbu.Artifacts {
		ops[a.Name] = a.Op
	}
	for _, a := range sbu.Artifacts {
		if a.Op == "remove" && (a.Content != "" || a.ContentSHA256 != "") {
			t.Fatalf("removal carries content %+v", a)
		}
	}
	if ops["table-extract"] != "remove" || ops["pdf-tables"] != "add" {
		t.Fatalf("sb evo-2 ops %v", ops)
	}
	if skillsByStatus["list_skills/loaded"] != 1 || skillsByStatus["load_skill/not_found"] != 1 || skillsByStatus["load_skill/loaded"] != 2 || skillsByStatus["load_skill_reference/loaded"] != 1 {
		t.Fatalf("skill events %v", skillsByStatus)
	}
	if c := started["sonnet46_x_opus46_mcp_s2"]; c == nil || c.Route != schemas.RouteInSitu || c.EvolverModel != "opus46" || c.Seed != 2 || c.CampaignID != "paper-run" {
		t.Fatalf("mcp evolved cell %+v", c)
	}
	if c := started["haiku45_x_none_sb_s1"]; c.Route != schemas.RouteBaseline || c.EvolverModel != "" || c.MaxAttempts != 2 {
		t.Fatalf("sb baseline cell %+v", c)
	}
	if len(finished) != 5 || finished["sonnet46_x_opus46_mcp_s2"] {
		t.Fatalf("finished %v: the mcp evolved cell has no done marker", finished)
	}
	for _, c := range sum.Cells {
		if c.CellID == "qwen235b_x_qwen32b_swe_s1" && (c.AgentModelID != "Qwen/Qwen3-235B-A22B" || c.EvolverModelID != "Qwen/Qwen3-32B") {
			t.Fatalf("model ids %+v", c)
		}
	}
	// The per-file report says what was skipped and why.
	for _, want := range []string{
		"results.json: read 4 rows, skipped 1 (no instance_id: 1)",
		"batch_0002.jsonl: read 2 rows, skipped 2 (trailer record: 1, unparseable: 1)",
		"summary.csv: read 5 rows, skipped 1 (unknown result: 1)",
		"results.jsonl: read 8 rows, skipped 1 (trailer record: 1)",
		"trajectory.json: read 4 rows, skipped 1 (unknown tool: 1)",
		"workspace (git tags): read 3 rows, skipped 1 (empty diff: 1)",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestImportDeterministic(t *testing.T) {
	t.Parallel()
	root := buildFixtures(t)
	a, _, _ := importAll(t, Config{Dir: root, Campaign: "c1"})
	b, _, _ := importAll(t, Config{Dir: root, Campaign: "c1"})
	if len(a) != len(b) {
		t.Fatalf("%d vs %d events", len(a), len(b))
	}
	for i := range a {
		ja, _ := schemas.MarshalJSON(a[i])
		jb, _ := schemas.MarshalJSON(b[i])
		if !bytes.Equal(ja, jb) {
			t.Fatalf("event %d differs:\n%s\n%s", i, ja, jb)
		}
	}
}

func TestImportSingleCellAndErrors(t *testing.T) {
	t.Parallel()
	root := buildFixtures(t)
	cell := filepath.Join(root, "mcp", "sonnet46_x_none_mcp_s2")
	evs, sum, _ := importAll(t, Config{Dir: cell})
	if len(sum.Cells) != 1 || sum.Campaign != "sonnet46_x_none_mcp_s2" {
		t.Fatalf("%+v", sum)
	}
	if _, ok := evs[0].(*schemas.CampaignDeclared); !ok {
		t.Fatal("no campaign_declared first")
	}
	empty := t.TempDir()
	if _, err := Import(context.Background(), Config{Dir: empty}, func(schemas.Event) error { return nil }, nil); !errors.Is(err, ErrNoCells) {
		t.Fatalf("empty dir: %v", err)
	}
	evolved := filepath.Join(root, "swe", "qwen235b_x_qwen32b_swe_s1")
	_, err := Import(context.Background(), Config{Dir: evolved, Git: "no-such-git-binary"}, func(schemas.Event) error { return nil }, nil)
	if !errors.Is(err, ErrNoGit) {
		t.Fatalf("missing git: %v", err)
	}
	if _, err := Import(context.Background(), Config{Dir: filepath.Join(root, "nope")}, func(schemas.Event) error { return nil }, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("missing dir: %v", err)
	}
}

func TestNormalizePythonRepr(t *testing.T) {
	t.Parallel()
	in := `{'a': True, 'b': None, "c": "True 'x'", 'd': 'it\'s "q"', 'e': [False, NaN, -Infinity]}`
	var m map[string]any
	if err := parseLoose([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if m["a"] != true || m["b"] != nil || m["c"] != "True 'x'" || m["d"] != `it's "q"` {
		t.Fatalf("%v", m)
	}
}

// readAll reads every message of the raw topics from offset 0.
func readAll(t *testing.T, ctx context.Context, addr string) []string {
	t.Helper()
	var ids []string
	for _, topic := range schemas.RawTopics {
		conn, err := kafka.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		parts, err := conn.ReadPartitions(topic)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			lc, err := kafka.DialLeader(ctx, "tcp", addr, topic, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			last, err := lc.ReadLastOffset()
			lc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if last == 0 {
				continue
			}
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
			for off := int64(0); off < last; off++ {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				ev, err := schemas.Decode(m.Value)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				ids = append(ids, ev.Header().EventID)
			}
			r.Close()
		}
	}
	sort.Strings(ids)
	return ids
}

// TestImportTwiceIntoKafka imports the same tree twice through the real
// producer into an embedded broker: the second import re-sends exactly the
// same event ids (so every sink deduplicates them) and no new one.
func TestImportTwiceIntoKafka(t *testing.T) {
	t.Parallel()
	root := buildFixtures(t)
	b := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := func() Summary {
		p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := Run(ctx, Config{Dir: root}, p, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	s1 := run()
	first := readAll(t, ctx, b.Addr())
	if len(first) != s1.Events {
		t.Fatalf("%d messages for %d events", len(first), s1.Events)
	}
	s2 := run()
	both := readAll(t, ctx, b.Addr())
	if s2.Events != s1.Events || len(both) != 2*len(first) {
		t.Fatalf("second import: %d events, %d messages in all", s2.Events, len(both))
	}
	distinct := map[string]int{}
	for _, id := range both {
		distinct[id]++
	}
	if len(distinct) != len(first) {
		t.Fatalf("%d distinct ids after two imports, %d after one", len(distinct), len(first))
	}
	for id, n := range distinct {
		if n != 2 {
			t.Fatalf("id %s seen %d times", id, n)
		}
	}
}
