package trainer

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

func TestBagMergerCollapsesRepeats(t *testing.T) {
	t.Parallel()
	var b bagMerger
	// An earlier bag [7 7] sits before start and must stay as it is.
	idx := []int32{7, 7, 3, 5, 3, 9, 5, 3}
	w := []float32{1, 1, 0.5, 0.25, 0.5, 1, 0.25, 0.125}
	idx, w = b.merge(idx, w, 2, 16)
	if want := []int32{7, 7, 3, 5, 9}; fmt.Sprint(idx) != fmt.Sprint(want) {
		t.Fatalf("ids %v, want %v", idx, want)
	}
	if want := []float32{1, 1, 1.125, 0.5, 1}; fmt.Sprint(w) != fmt.Sprint(want) {
		t.Fatalf("weights %v, want %v", w, want)
	}
	// The next bag shares ids with the last one: they are its own entries.
	start := len(idx)
	idx, w = b.merge(append(idx, 3, 9, 3), append(w, 1, 2, 4), start, 16)
	if got := fmt.Sprint(idx[start:], w[start:]); got != "[3 9] [5 2]" {
		t.Fatalf("second bag %s, want [3 9] [5 2]", got)
	}
	// When the generation wraps, a row marked in an old generation that
	// happens to equal the new one must not be taken for a repeat.
	b.gen[9], b.pos[9], b.cur = 1, 0, math.MaxUint32
	idx, w = b.merge([]int32{9, 4, 4}, []float32{1, 2, 3}, 0, 16)
	if got := fmt.Sprint(idx, w); got != "[9 4] [1 5]" {
		t.Fatalf("after the wrap %s, want [9 4] [1 5]", got)
	}
}

// evidenceInput is a sample shaped like the processors' labeled samples: a
// query of per-task evidence lines and a skill update.
func evidenceInput(i, tasks int) Input {
	var q strings.Builder
	for k := 0; k < tasks; k++ {
		status, score := "pass", 1
		if (i+k)%3 == 0 {
			status, score = "fail", 0
		}
		fmt.Fprintf(&q, "task task-%03d: %s score=%d\n", k, status, score)
	}
	up := fmt.Sprintf("### skill skill-%d (add)\n---\nname: skill-%d\ndescription: How to handle round %d of camp-%d for agent-%d\n---\n# skill-%d\n\nhandle round %d\n",
		i, i, i%10, i%7, i%5, i, i%10)
	return Input{Update: up, Query: q.String(), Kind: "skill", Evolver: "evolver-0", Agent: fmt.Sprintf("agent-%d", i%5), Benchmark: "swe"}
}

// The merged bags embed every input as the raw bags do (up to float rounding),
// with fewer entries.
func TestMergedBagsEmbedLikeRawBags(t *testing.T) {
	t.Parallel()
	f := featurizer{buckets: 1 << 12, cat: 64, maxText: 2048}
	rows, D := f.rows(), 8
	cpu := backend.NewCPU()
	table := make([]float32, rows*D)
	for i := range table {
		table[i] = float32(math.Sin(float64(i)))
	}
	var b bagMerger
	var rawIdx, idx []int32
	var rawW, w []float32
	rawOff, off := []int32{0}, []int32{0}
	const B = 6
	for i := 0; i < B; i++ {
		in := evidenceInput(i, 40)
		rawIdx, rawW = f.features(rawIdx, rawW, &in)
		rawOff = append(rawOff, int32(len(rawIdx)))
		start := len(idx)
		idx, w = f.features(idx, w, &in)
		idx, w = b.merge(idx, w, start, rows)
		off = append(off, int32(len(idx)))
	}
	if len(idx)*2 > len(rawIdx) {
		t.Fatalf("merged bags hold %d of %d entries; evidence text should at least halve them", len(idx), len(rawIdx))
	}
	embed := func(idx, off []int32, w []float32) []float32 {
		tb, ib, ob, wb, out := cpu.Alloc(len(table)), cpu.AllocInt(len(idx)), cpu.AllocInt(len(off)), cpu.Alloc(len(w)), cpu.Alloc(B*D)
		cpu.Upload(tb, table)
		cpu.UploadInt(ib, idx)
		cpu.UploadInt(ob, off)
		cpu.Upload(wb, w)
		cpu.EmbeddingBag(out, tb, ib, ob, wb, B, D)
		host := make([]float32, B*D)
		cpu.Download(host, out)
		return host
	}
	want, got := embed(rawIdx, rawOff, rawW), embed(idx, off, w)
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("output %d: merged %v, raw %v", i, got[i], want[i])
		}
	}
}

// TestCrossesSeparateContexts: without crosses, one update on two
// benchmarks differs only in the benchmark row; with crosses, each of its
// words has a row per benchmark (and per agent and kind), the other rows
// are unchanged, and a checkpoint restores only with the same setting.
func TestCrossesSeparateContexts(t *testing.T) {
	t.Parallel()
	in := Input{Update: "check the failing test first, then patch", Kind: "skill", Evolver: "e", Agent: "a", Benchmark: "swe"}
	other := in
	other.Benchmark = "mcp"
	bag := func(f featurizer, in Input) map[int32]float32 {
		idx, w := f.features(nil, nil, &in)
		out := map[int32]float32{}
		for i, r := range idx {
			out[r] += w[i]
		}
		return out
	}
	diff := func(a, b map[int32]float32) (n int) {
		for r, w := range a {
			if b[r] != w {
				n++
			}
		}
		for r := range b {
			if _, ok := a[r]; !ok {
				n++
			}
		}
		return n
	}
	plain := featurizer{buckets: 1 << 16, cat: 64, maxText: 2048}
	if d := diff(bag(plain, in), bag(plain, other)); d != 2 {
		t.Fatalf("without crosses the benchmarks' bags differ in %d rows, want 2 (one benchmark row each)", d)
	}
	crossed := plain
	crossed.crosses = true
	words := 7                                                             // distinct words of the update
	if d := diff(bag(crossed, in), bag(crossed, other)); d < 2+2*words-2 { // a hash collision may merge a pair
		t.Fatalf("with crosses the benchmarks' bags differ in %d rows, want about %d", d, 2+2*words)
	}
	base, withX := bag(plain, in), bag(crossed, in)
	for r, w := range base {
		if withX[r] < w {
			t.Fatalf("crosses changed row %d of the plain features", r)
		}
	}
	if len(withX) < len(base)+3*words-3 {
		t.Fatalf("crosses added %d rows, want about %d", len(withX)-len(base), 3*words)
	}

	be := backend.NewCPU()
	m, err := NewModel(be, ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 4, Hidden: 4})
	if err != nil {
		t.Fatal(err)
	}
	mx, err := NewModel(be, ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 4, Hidden: 4, Crosses: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := mx.Restore(m.State()); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("restoring plain weights into a crossed model: %v, want ErrIncompatible", err)
	}
	if err := mx.Restore(mx.State()); err != nil {
		t.Fatal(err)
	}
}

// TestContextFeatures: the context rows are a cell row and, with an
// evidence figure x in the query, a pair of rows weighted x and 1 − x at
// each of four levels (linear in x, summing to 1 per level); x is clamped
// to [0, 1]; two cells differ in their cell-level rows only (besides the
// categorical rows); without evidence only the cell row is added; and a
// checkpoint restores only with the same setting.
func TestContextFeatures(t *testing.T) {
	t.Parallel()
	plain := featurizer{buckets: 1 << 16, cat: 64, maxText: 2048}
	ctx := plain
	ctx.context = true
	in := Input{Update: "check the failing test first", Query: "evidence summary: round 1: 1 of 4 tasks failed", Kind: "skill",
		Evolver: "e", Agent: "a", Benchmark: "swe"}
	added := func(in Input) (idx []int32, w []float32) {
		n, _ := plain.features(nil, nil, &in)
		idx, w = ctx.features(nil, nil, &in)
		return idx[len(n):], w[len(n):]
	}
	idx, w := added(in)
	if len(idx) != 1+8 || w[0] != 1 {
		t.Fatalf("context rows %v weights %v: want the cell row (weight 1) and 4 pairs", idx, w)
	}
	for i := 1; i < len(w); i += 2 {
		if w[i] != 0.75 || w[i+1] != 0.25 {
			t.Fatalf("pair %d weights %v, %v: want x = 0.75 and 1 − x", i/2, w[i], w[i+1])
		}
	}
	hostile := in
	hostile.Query = "task t1: pass score=1e30\ntask t2: pass score=0.5\n"
	if _, w := added(hostile); w[1] != 0.5 || w[2] != 0.5 {
		t.Fatalf("score 1e30 beside 0.5 gave weights %v: want x = 0.5 (1e30 is no score)", w)
	}
	// The figure reads whole lines past the hashed text's bound: 40 tasks
	// of evidence (over 2 KiB), the last 20 failing.
	var long strings.Builder
	for i := range 40 {
		fmt.Fprintf(&long, "task t%02d: %s score=%d\ninput: %s\n", i, map[bool]string{true: "pass", false: "fail"}[i < 20], map[bool]int{true: 1, false: 0}[i < 20], strings.Repeat("x", 40))
	}
	long40 := in
	long40.Query = long.String()
	if len(long40.Query) <= ctx.maxText {
		t.Fatalf("query of %d bytes: want it over %d", len(long40.Query), ctx.maxText)
	}
	if _, w := added(long40); w[1] != 0.5 {
		t.Fatalf("40 tasks, 20 passing: x = %v, want 0.5 (every line read)", w[1])
	}
	if got := clipLines("a=1\nb=22\nc=333", 9); got != "a=1\nb=22" {
		t.Fatalf("clipLines cut %q: want whole lines", got)
	}
	none := in
	none.Query = "no figures here"
	if idx, _ := added(none); len(idx) != 1 {
		t.Fatalf("without evidence %d context rows, want the cell row only", len(idx))
	}
	other := in
	other.Evolver = "f"
	a, _ := added(in)
	b, _ := added(other)
	same := 0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
	}
	if same != 6 { // the global, benchmark and agent × benchmark pairs
		t.Fatalf("two evolvers share %d context rows, want 6 (every level but the cell's)", same)
	}

	be := backend.NewCPU()
	m, err := NewModel(be, ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 4, Hidden: 4})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := NewModel(be, ModelConfig{Buckets: 1 << 10, CatBuckets: 16, Dim: 4, Hidden: 4, Context: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.Restore(m.State()); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("restoring plain weights into a context model: %v, want ErrIncompatible", err)
	}
	if err := mc.Restore(mc.State()); err != nil {
		t.Fatal(err)
	}
}

// evidenceLine is the pattern of an evidence task line that
// evidenceFigure implements (the fuzz test holds them equal).
var evidenceLine = regexp.MustCompile(`(?m)^task .+: (?:pass|fail) score=(\S+)$`)

// FuzzEvidenceScore: any query parses without panicking to a figure in
// [0, 1] or to none.
func FuzzEvidenceScore(f *testing.F) {
	for _, q := range []string{"task t1: pass score=1\ntask t2: fail score=0.5", "evidence summary: x 3 of 4 tasks failed",
		"task t: pass score=1e308\ntask u: pass score=1e308", "evidence summary: 5 of 0 tasks failed", "task : fail score=-0",
		"task a: pass score=1 x", "task a: pass score=x: fail score=0.5", "task é: fail score=0\r", "task  : pass score=0.25\ttask b: pass score=1"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		x, ok := EvidenceScore(q)
		if ok && !(x >= 0 && x <= 1) {
			t.Fatalf("EvidenceScore(%q) = %v", q, x)
		}
		// The line scanner agrees with the pattern it replaces.
		for _, line := range strings.Split(q, "\n") {
			f, ok := evidenceFigure(line)
			var want []string
			if m := evidenceLine.FindStringSubmatch(line); m != nil {
				want = m[1:]
			}
			if ok != (want != nil) || (ok && f != want[0]) {
				t.Fatalf("line %q: figure %q %v, the pattern says %q", line, f, ok, want)
			}
		}
	})
}
