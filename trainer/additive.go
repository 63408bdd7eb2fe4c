package trainer

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// The additive critic (ModelConfig.Structure = StructureAdditive). Its
// effect forecast is a sum of two parts with separate parameters:
//
//	mean = base(context) + Σ_k scale_k(context) · text_k(update, benchmark)
//
// base is linear in the context rows of the context regression
// (trainer/eval's strongest baseline): a level per (evolver, agent,
// benchmark) cell and an evidence slope, as rows weighted by the evidence
// pass rate x and 1 − x at four levels (global, benchmark, agent ×
// benchmark, cell), so a sparse cell shrinks towards the coarser levels.
// Reading the update cannot change it, so the text part is fitted on what
// it leaves.
//
// The text part is a rank-K bilinear form: text_k is linear in the
// update's counts (each word's count, alone and crossed with the
// benchmark; per markdown section, the number of its items under each word
// of its heading; lines, items and sections overall), and scale_k in the
// context rows (global, benchmark, agent × benchmark, cell). So the same
// advice can weigh differently per benchmark, and its size can grow or
// shrink with the agent and benchmark — an update's lift is a share of
// what the cell can gain at all — which a sum of word × context rows
// cannot express. Counts, not length-normalised n-grams: one more
// verification step is one more item, whatever the rest of the text.
//
// The network of the MLP structure stays beside it, reading every feature,
// for what is not a mean: the log-variance and the three label logits.
// Its mean output is unused.

// Model structures (ModelConfig.Structure).
const (
	// StructureAdditive is the additive critic above (the default).
	StructureAdditive = "additive"
	// StructureMLP is one network over the summed bag of every feature,
	// for the mean too (checkpoints written before the field existed).
	StructureMLP = "mlp"
)

// FeatureSet names what a model of cfg reads and how, as /v1/score's
// answers and the checkpoint's log lines name it: its structure, then its
// feature families. A checkpoint restores only into a model whose feature
// set is the same.
func FeatureSet(cfg ModelConfig) string {
	var parts []string
	switch structureOf(cfg) {
	case StructureAdditive:
		parts = append(parts, fmt.Sprintf("additive(rank %d): context-regression base + counts×benchmark text", cfg.Rank))
	default:
		parts = append(parts, "mlp")
	}
	parts = append(parts, "ngrams")
	if cfg.Crosses {
		parts = append(parts, "crosses")
	}
	if cfg.Context {
		parts = append(parts, "context")
	}
	return strings.Join(parts, "; ")
}

// Sizes of the additive critic's tables.
const (
	// DefaultRank is ModelConfig.Rank's default: the bilinear text part's K.
	DefaultRank = 4
	// DefaultRoundWeight is ModelConfig.RoundWeight's default, and
	// DefaultTextLRScale ModelConfig.TextLRScale's: chosen on bench
	// critic-offline's 25-task rounds (bench/README.md, "The critic").
	DefaultRoundWeight = 30
	DefaultTextLRScale = 3
	// baseRows and scaleRows are the hashed rows of the base and scale
	// tables (a context has tens to hundreds of cells).
	baseRows  = 1 << 14
	scaleRows = 1 << 12
	// maxCountBytes bounds the update text counted (whole lines): a skill
	// is a few KiB; a hostile one costs a bounded, linear scan.
	maxCountBytes = 1 << 15
	// countScale divides every count: a fixed divisor, so the text part
	// stays linear in each count (not normalised by the text's length),
	// while a text of a few hundred words moves its figure by a few
	// hundredths, not by its whole size, per optimizer step (AdamW moves
	// each weight by about the learning rate, whatever its gradient).
	countScale = 64
)

// Hash spaces of the additive critic's features (after features.go's).
const (
	spaceBase byte = iota + 64
	spaceScale
	spaceCountWord
	spaceCountWordBench
	spaceCountSection
	spaceCountSectionBench
	spaceCountShape
	spaceCountShapeBench
)

// scaleGlobalRow is the scale table's row every input has.
var scaleGlobalRow = int32(fnv1a(spaceScale, "global") % scaleRows)

// appendScale appends the scale rows of in.
func appendScale(idx []int32, w []float32, in *Input) ([]int32, []float32) {
	ev, ag, bm := strings.ToLower(in.Evolver), strings.ToLower(in.Agent), strings.ToLower(in.Benchmark)
	row := func(parts ...string) int32 { return int32(fnv1a(spaceScale, parts...) % scaleRows) }
	idx = append(idx, scaleGlobalRow, row("benchmark", bm), row("agent", ag, bm), row("cell", ev, ag, bm))
	w = append(w, 1, 1, 1, 1)
	return idx, w
}

// isItem reports whether a trimmed line is a list item (bullet, numbered
// or check-box) and returns its text.
func isItem(line string) (string, bool) {
	for _, p := range []string{"- [ ] ", "* [ ] ", "- [x] ", "[ ] ", "- ", "* ", "+ "} {
		if strings.HasPrefix(line, p) {
			return line[len(p):], true
		}
	}
	i := 0
	for i < len(line) && line[i] >= '0' && line[i] <= '9' {
		i++
	}
	if i > 0 && i+1 < len(line) && (line[i] == '.' || line[i] == ')') && line[i+1] == ' ' {
		return line[i+2:], true
	}
	return "", false
}

// countText counts an update text's words and its markdown shape: each
// word's occurrences; per section (a heading line and what follows it), the
// words of the heading and the number of items under it (list items, and
// paragraphs: runs of other non-empty lines); and lines, items and
// sections overall.
type countText struct {
	words    map[string]int
	sections []section
	lines    int
	items    int
}

type section struct {
	heading []string
	items   int
}

func countUpdate(text string) countText {
	c := countText{words: map[string]int{}}
	cur := section{}
	inPara := false
	flush := func() {
		if len(cur.heading) > 0 || cur.items > 0 {
			c.sections = append(c.sections, cur)
		}
	}
	for _, line := range strings.Split(clipLines(text, maxCountBytes), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			inPara = false
			continue
		}
		c.lines++
		for _, w := range words(line) {
			c.words[w]++
		}
		if strings.HasPrefix(line, "#") {
			flush()
			cur = section{heading: words(strings.TrimLeft(line, "#"))}
			inPara = false
			continue
		}
		if _, ok := isItem(line); ok {
			cur.items++
			c.items++
			inPara = false
			continue
		}
		if strings.HasPrefix(line, ">") || !inPara {
			cur.items++
			c.items++
			inPara = !strings.HasPrefix(line, ">")
		}
	}
	flush()
	return c
}

// appendCounts appends the text rows of in (featurizer.buckets rows).
func (f featurizer) appendCounts(idx []int32, w []float32, in *Input) ([]int32, []float32) {
	bm := strings.ToLower(in.Benchmark)
	c := countUpdate(in.Update)
	add := func(space, spaceBench byte, n float64, parts ...string) {
		idx = append(idx, int32(fnv1a(space, parts...)%uint64(f.buckets)),
			int32(fnv1a(spaceBench, append([]string{bm}, parts...)...)%uint64(f.buckets)))
		w = append(w, float32(n/countScale), float32(n/countScale))
	}
	// Sorted, so the bag's float sums (and the model) are deterministic.
	for _, word := range slices.Sorted(maps.Keys(c.words)) {
		add(spaceCountWord, spaceCountWordBench, float64(c.words[word]), word)
	}
	for _, s := range c.sections {
		seen := map[string]bool{}
		for _, h := range s.heading {
			if !seen[h] && strings.IndexFunc(h, unicode.IsLetter) >= 0 {
				seen[h] = true
				add(spaceCountSection, spaceCountSectionBench, float64(s.items), h)
			}
		}
	}
	add(spaceCountShape, spaceCountShapeBench, float64(c.lines), "lines")
	add(spaceCountShape, spaceCountShapeBench, float64(c.items), "items")
	add(spaceCountShape, spaceCountShapeBench, float64(len(c.sections)), "sections")
	return idx, w
}

// sparseBag is one EmbeddingBag over a table of its own: its index,
// offset and weight buffers, its output and the output's gradient, on the
// model's backend.
type sparseBag struct {
	table      *param
	dim        int
	idx, off   backend.IntBuffer
	wts        backend.Buffer
	out, dOut  backend.Buffer
	capB, capN int
	// host is the downloaded output, batch×dim.
	host []float32
}

// run uploads the bags of one batch (idx, w, off as EmbeddingBag takes
// them) and computes and downloads their sums over table (the bag's own
// weights, or their average).
func (s *sparseBag) run(be backend.Backend, table backend.Buffer, idx []int32, w []float32, off []int32) []float32 {
	B := len(off) - 1
	if B > s.capB {
		if s.out != nil {
			be.Free(s.out)
			be.Free(s.dOut)
			be.FreeInt(s.off)
		}
		s.capB = B
		s.out, s.dOut, s.off = be.Alloc(B*s.dim), be.Alloc(B*s.dim), be.AllocInt(B+1)
	}
	if len(idx) > s.capN || s.idx == nil {
		if s.idx != nil {
			be.FreeInt(s.idx)
			be.Free(s.wts)
		}
		s.capN = max(len(idx), 2*s.capN, 1)
		s.idx, s.wts = be.AllocInt(s.capN), be.Alloc(s.capN)
	}
	be.UploadInt(s.idx, idx)
	be.Upload(s.wts, w)
	be.UploadInt(s.off, off)
	be.EmbeddingBag(s.out, table, s.idx, s.off, s.wts, B, s.dim)
	if cap(s.host) < B*s.dim {
		s.host = make([]float32, B*s.dim)
	}
	s.host = s.host[:B*s.dim]
	be.Download(s.host, s.out)
	return s.host
}

// backward accumulates the table's gradient from grad (batch×dim) for the
// batch run last uploaded.
func (s *sparseBag) backward(be backend.Backend, grad []float32) {
	B := len(grad) / s.dim
	be.Upload(s.dOut, grad)
	be.EmbeddingBagBackward(s.table.g, s.dOut, s.idx, s.off, s.wts, B, s.dim)
}

// additive holds the additive critic's parts and the last forward's
// factors, for the backward pass.
type additive struct {
	rank        int
	base        baseFit
	shrink      textShrink
	scale, text sparseBag
	// avg is the tables' moving average predictions read (nil: off).
	avg  *average
	s, t []float32
	idx  []int32
	w    []float32
	off  []int32
}

// newAdditive allocates the additive critic's parts on m: the base's
// statistics empty, the scale's global row 1/√K plus a small spread (every
// other row a small spread), the text rows a small spread, so the K
// factors start apart.
func (m *Model) newAdditive(uniform func(n int, a float64) []float32) {
	K := m.cfg.Rank
	a := &additive{rank: K}
	a.base = baseFit{param: m.newParam("base", make([]float32, 2*baseRows*nStat)), sums: make([]float64, baseRows*nStat)}
	a.base.param.frozen = true
	sc := uniform(scaleRows*K, 0.05)
	for k := 0; k < K; k++ {
		sc[int(scaleGlobalRow)*K+k] += float32(1 / math.Sqrt(float64(K)))
	}
	tx := uniform(m.cfg.Buckets*K, 0.001)
	a.scale = sparseBag{table: m.newParam("scale", sc), dim: K}
	a.text = sparseBag{table: m.newParam("text", tx), dim: K}
	a.text.table.lrScale, a.scale.table.lrScale = m.cfg.TextLRScale, m.cfg.TextLRScale
	// After the tables, so a checkpoint written before it existed lines
	// up (Restore).
	a.shrink = textShrink{param: m.newParam("shrink", make([]float32, 6))}
	a.shrink.param.frozen = true
	if m.cfg.AverageDecay > 0 {
		// Last, for the same reason.
		m.newAverage(a, sc, tx)
	}
	m.add = a
}

// forward computes the mean of each input of the batch into means, keeping
// the factors for backward: base + Σ s·t when training, base + α·Σ s·t
// (textShrink) when predicting, s and t from the tables' moving average
// when there is one (average.go).
func (a *additive) forward(be backend.Backend, f featurizer, ins []*Input, means []float64, training bool) {
	run := func(bag *sparseBag, table *param, feats func(idx []int32, w []float32, in *Input) ([]int32, []float32)) []float32 {
		a.idx, a.w, a.off = a.idx[:0], a.w[:0], append(a.off[:0], 0)
		for _, in := range ins {
			a.idx, a.w = feats(a.idx, a.w, in)
			a.off = append(a.off, int32(len(a.idx)))
		}
		return bag.run(be, table.p, a.idx, a.w, a.off)
	}
	scale, text := a.scale.table, a.text.table
	if !training && a.avg != nil {
		scale, text = a.avg.scale, a.avg.text
	}
	a.s = run(&a.scale, scale, appendScale)
	a.t = run(&a.text, text, f.appendCounts)
	alpha := 1.0
	if !training {
		alpha = a.shrink.alpha()
	}
	for i, in := range ins {
		means[i] = a.base.predict(in) + alpha*a.textPart(i)
	}
}

// textPart is Σ_k s_k·t_k of the last forward's i-th input.
func (a *additive) textPart(i int) float64 {
	var v float64
	for k := 0; k < a.rank; k++ {
		v += float64(a.s[i*a.rank+k]) * float64(a.t[i*a.rank+k])
	}
	return v
}

// backward accumulates the factors' gradients for dMean, the loss's
// gradient with respect to each input's mean (the base has none: it is
// fitted in closed form).
func (a *additive) backward(be backend.Backend, dMean []float32) {
	K, B := a.rank, len(dMean)
	dS, dT := make([]float32, B*K), make([]float32, B*K)
	for i, g := range dMean {
		for k := 0; k < K; k++ {
			dS[i*K+k] = g * a.t[i*K+k]
			dT[i*K+k] = g * a.s[i*K+k]
		}
	}
	a.scale.backward(be, dS)
	a.text.backward(be, dT)
}
