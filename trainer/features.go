package trainer

import (
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Input is what the model sees of one candidate update.
type Input struct {
	// Update is the artifact text.
	Update string `json:"update"`
	// Query is the evidence context the evolver saw (optional).
	Query string `json:"query"`
	// Kind is the artifact kind (prompt, skill, memory, tool).
	Kind string `json:"kind"`
	// Evolver, Agent and Benchmark name the evolver model, the agent model and
	// the benchmark.
	Evolver   string `json:"evolver"`
	Agent     string `json:"agent"`
	Benchmark string `json:"benchmark"`
}

// Hash spaces: every text feature family hashes with its own seed so that the
// same string in the update and in the query lands in different buckets.
const (
	spaceUpdateWord byte = iota + 1
	spaceUpdateBigram
	spaceUpdateChar
	spaceQueryWord
	spaceQueryBigram
	spaceQueryChar
	spaceKind
	spaceEvolver
	spaceAgent
	spaceBenchmark
	spaceCrossBenchmark
	spaceCrossAgent
	spaceCrossKind
	spaceContextCell
	spaceContextEvidence
)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv1a hashes the space byte, then each part separated by a 0xff byte.
func fnv1a(space byte, parts ...string) uint64 {
	h := uint64(fnvOffset)
	h ^= uint64(space)
	h *= fnvPrime
	for i, p := range parts {
		if i > 0 {
			h ^= 0xff
			h *= fnvPrime
		}
		for j := 0; j < len(p); j++ {
			h ^= uint64(p[j])
			h *= fnvPrime
		}
	}
	return h
}

// featurizer turns an Input into EmbeddingBag indices and weights. Table
// layout: rows [0, Buckets) hold the hashed text n-grams (word unigrams and
// bigrams, character 3- to 5-grams, of the update and of the query), then four
// tables of CatBuckets rows for kind, evolver, agent and benchmark.
type featurizer struct {
	buckets, cat, maxText int
	// crosses adds, into the text rows, each distinct update word crossed
	// with the benchmark, with the agent and with the artifact kind
	// (ModelConfig.Crosses): a row of its own per (word, context), so that
	// advice which helps on one benchmark or agent and not on another has
	// a weight of its own in each, additively, instead of only through
	// the MLP's nonlinearity on the summed bag.
	crosses bool
	// context adds the update's context as rows of its own
	// (ModelConfig.Context): one per (evolver, agent, benchmark) cell, and
	// the evidence pass rate x parsed from the query (EvidenceScore) as a
	// pair of rows weighted x and 1 − x, at four levels (global, benchmark,
	// agent × benchmark, cell), so that the bag is linear in x with a
	// level and a slope of its own per cell that shrink towards the
	// coarser levels' where a cell has few samples.
	context bool
}

func (f featurizer) rows() int { return f.buckets + 4*f.cat }

func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// appendText appends the hashed features of one text with per-family weight
// 1/sqrt(count), so long and short texts have comparable magnitudes.
func (f featurizer) appendText(idx []int32, w []float32, text string, sw, sb, sc byte) ([]int32, []float32) {
	text = clip(text, f.maxText)
	ws := words(text)
	add := func(hs []uint64) {
		if len(hs) == 0 {
			return
		}
		wt := float32(1 / math.Sqrt(float64(len(hs))))
		for _, h := range hs {
			idx = append(idx, int32(h%uint64(f.buckets)))
			w = append(w, wt)
		}
	}
	hs := make([]uint64, 0, len(ws))
	for _, x := range ws {
		hs = append(hs, fnv1a(sw, x))
	}
	add(hs)
	hs = hs[:0]
	for i := 1; i < len(ws); i++ {
		hs = append(hs, fnv1a(sb, ws[i-1], ws[i]))
	}
	add(hs)
	hs = hs[:0]
	norm := strings.Join(ws, " ")
	for n := 3; n <= 5; n++ {
		for i := 0; i+n <= len(norm); i++ {
			hs = append(hs, fnv1a(sc, norm[i:i+n]))
		}
	}
	add(hs)
	return idx, w
}

// features appends in's indices and weights to idx and w.
func (f featurizer) features(idx []int32, w []float32, in *Input) ([]int32, []float32) {
	idx, w = f.appendText(idx, w, in.Update, spaceUpdateWord, spaceUpdateBigram, spaceUpdateChar)
	idx, w = f.appendText(idx, w, in.Query, spaceQueryWord, spaceQueryBigram, spaceQueryChar)
	for i, c := range []struct {
		s     byte
		value string
	}{{spaceKind, in.Kind}, {spaceEvolver, in.Evolver}, {spaceAgent, in.Agent}, {spaceBenchmark, in.Benchmark}} {
		row := f.buckets + i*f.cat + int(fnv1a(c.s, strings.ToLower(c.value))%uint64(f.cat))
		idx = append(idx, int32(row))
		w = append(w, 1)
	}
	if f.crosses {
		idx, w = f.appendCrosses(idx, w, in)
	}
	if f.context {
		idx, w = f.appendContext(idx, w, in)
	}
	return idx, w
}

// maxEvidenceBytes bounds the query text the context features parse for the
// evidence figure (whole lines only): far more than the hashed text's
// MaxTextBytes, which a round of 25 tasks' evidence already exceeds, while
// a hostile query costs a bounded, linear scan.
const maxEvidenceBytes = 1 << 16

// clipLines cuts s to at most n bytes, at the end of its last whole line
// within them.
func clipLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return ""
}

// appendContext appends the context rows (featurizer.context). The
// evidence figure is EvidenceScore of the query's first maxEvidenceBytes
// (whole lines), in [0, 1]; a query without one adds no evidence rows.
func (f featurizer) appendContext(idx []int32, w []float32, in *Input) ([]int32, []float32) {
	ev, ag, bm := strings.ToLower(in.Evolver), strings.ToLower(in.Agent), strings.ToLower(in.Benchmark)
	row := func(parts ...string) int32 {
		return int32(fnv1a(spaceContextEvidence, parts...) % uint64(f.buckets))
	}
	idx = append(idx, int32(fnv1a(spaceContextCell, ev, ag, bm)%uint64(f.buckets)))
	w = append(w, 1)
	x, ok := EvidenceScore(clipLines(in.Query, maxEvidenceBytes))
	if !ok {
		return idx, w
	}
	x = min(max(x, 0), 1) // EvidenceScore's range already; kept so a weight can never blow up
	for _, level := range [][]string{{"global"}, {"benchmark", bm}, {"agent", ag, bm}, {"cell", ev, ag, bm}} {
		idx = append(idx, row(append(level, "x")...), row(append(level, "1-x")...))
		w = append(w, float32(x), float32(1-x))
	}
	return idx, w
}

// appendCrosses appends the update's distinct words crossed with the
// benchmark, the agent and the kind, each family with weight 1/sqrt(count)
// as appendText's families.
func (f featurizer) appendCrosses(idx []int32, w []float32, in *Input) ([]int32, []float32) {
	ws := words(clip(in.Update, f.maxText))
	if len(ws) == 0 {
		return idx, w
	}
	seen := make(map[string]struct{}, len(ws))
	uniq := ws[:0:0]
	for _, x := range ws {
		if _, ok := seen[x]; !ok {
			seen[x] = struct{}{}
			uniq = append(uniq, x)
		}
	}
	wt := float32(1 / math.Sqrt(float64(len(uniq))))
	for _, c := range []struct {
		s     byte
		value string
	}{{spaceCrossBenchmark, in.Benchmark}, {spaceCrossAgent, in.Agent}, {spaceCrossKind, in.Kind}} {
		ctx := strings.ToLower(c.value)
		for _, x := range uniq {
			idx = append(idx, int32(fnv1a(c.s, ctx, x)%uint64(f.buckets)))
			w = append(w, wt)
		}
	}
	return idx, w
}

// bagMerger collapses the repeated feature ids of one input's bag into one
// entry each, carrying the sum of their weights. The embedding bag is a
// weighted sum of rows, so Σ w_j·row equals (Σ w_j)·row and the gradient of
// a row is the same sum: the model is unchanged, up to float rounding, while
// the forward and backward passes touch each row of a bag once. Evidence
// text repeats its n-grams heavily (the per-task lines of a query share
// most of their characters), so bags shrink several-fold.
//
// It keeps, per table row, the generation of the bag that last used the row
// and where that bag's entry for it is; a new bag bumps the generation
// instead of clearing the arrays. Not safe for concurrent use (the Model
// that owns it is not either).
type bagMerger struct {
	gen []uint32
	pos []int32
	cur uint32
}

// merge collapses idx[start:] (one bag) in place, keeping the first
// occurrence of each id in order, and returns the shortened slices. Ids must
// lie in [0, rows).
func (b *bagMerger) merge(idx []int32, w []float32, start, rows int) ([]int32, []float32) {
	if len(b.gen) < rows {
		b.gen, b.pos, b.cur = make([]uint32, rows), make([]int32, rows), 0
	}
	b.cur++
	if b.cur == 0 { // wrapped: no stale generation may match
		clear(b.gen)
		b.cur = 1
	}
	gen, pos, cur := b.gen[:rows], b.pos[:rows], b.cur
	out := start
	for j := start; j < len(idx); j++ {
		r := idx[j]
		if gen[r] == cur {
			w[pos[r]] += w[j]
			continue
		}
		gen[r], pos[r] = cur, int32(out)
		idx[out], w[out] = r, w[j]
		out++
	}
	return idx[:out], w[:out]
}
