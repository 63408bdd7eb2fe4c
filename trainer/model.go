package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// Label classes, in the order of the model's three logits.
const (
	LabelNegative = 0
	LabelNeutral  = 1
	LabelPositive = 2
)

// LabelNames maps a class to the schema's label string.
var LabelNames = [3]string{"negative", "neutral", "positive"}

// LabelIndex returns the class of a label string, or -1.
func LabelIndex(s string) int {
	for i, n := range LabelNames {
		if n == s {
			return i
		}
	}
	return -1
}

// nOut is the model's output width: mean, log-variance, three label logits.
const nOut = 5

// logVarMin and logVarMax clamp the predicted log-variance (the gradient is
// zero outside), keeping the Gaussian NLL finite.
const (
	logVarMin = -9
	logVarMax = 4
)

// DefaultLR is ModelConfig.LR's default, AdamW's peak learning rate.
const DefaultLR = 0.003

// Defaults of ModelConfig.WeightDecay. The additive critic's hashed count
// rows see a rare word a few times an epoch, and AdamW moves a weight by
// about the learning rate whenever its gradient is not 0, whatever its
// size: without a strong decay the rare words fit their samples' noise and
// more epochs make the critic worse. Decoupled decay 1 pulls every row
// towards 0 by lr·1 per step between its appearances (chosen on bench
// critic; bench/README.md, "The critic").
const (
	DefaultWeightDecay         = 0.0001
	DefaultAdditiveWeightDecay = 1.0
)

// ModelConfig sizes and optimizes one reward model.
type ModelConfig struct {
	// Buckets is the number of hashed text n-gram rows. Default: 1<<18.
	Buckets int
	// CatBuckets is the rows of each categorical table (kind, evolver, agent,
	// benchmark). Default: 1024.
	CatBuckets int
	// Dim is the embedding width. Default: 16 in the additive structure,
	// 64 in the MLP one.
	Dim int
	// Hidden is the MLP's hidden width. Default: as Dim's.
	Hidden int
	// MaxTextBytes caps the bytes of update and query text hashed. Default: 2048.
	MaxTextBytes int
	// LR is AdamW's learning rate. Default: 0.003.
	LR float32
	// WeightDecay is AdamW's decoupled weight decay. Default:
	// DefaultAdditiveWeightDecay in the additive structure,
	// DefaultWeightDecay in the MLP one.
	WeightDecay float32
	// Beta1, Beta2, Eps are AdamW's moments and epsilon. Default: 0.9, 0.999, 1e-8.
	Beta1, Beta2, Eps float32
	// Seed makes initialization deterministic. Default: 0 (a valid seed).
	Seed uint64
	// Crosses adds update-word × context features (benchmark, agent,
	// artifact kind; featurizer.crosses) in the text rows: same tensors,
	// other features, so a checkpoint only restores into a model with the
	// same setting. Default: false (checkpoints written before the field
	// existed read as false).
	Crosses bool
	// Context adds the update's context as features (featurizer.context):
	// a row per (evolver, agent, benchmark) cell and the evidence pass rate
	// parsed from the query (EvidenceScore) as weights, so the model can
	// learn what trainer/eval's context regression fits (a level and an
	// evidence slope per cell) and the update text's effect on top. Same
	// tensors, other features: a checkpoint only restores into a model with
	// the same setting. Default: false (checkpoints written before the
	// field existed read as false).
	Context bool
	// Structure is StructureAdditive (the default: a base fitted on the
	// context plus a bilinear text part, additive.go) or StructureMLP (one
	// network for everything, the structure of checkpoints written before
	// the field existed). A checkpoint restores only into a model of its
	// structure.
	Structure string
	// Rank is the additive critic's K, the factors of its text part.
	// Default: DefaultRank.
	Rank int
	// RoundWeight weighs the loss's within-round term (withinRound)
	// against the pooled Gaussian NLL. Default: DefaultRoundWeight; a
	// negative value turns the term off.
	RoundWeight float64
	// TextLRScale multiplies the learning rate of the additive critic's
	// text and scale tables. Default: DefaultTextLRScale.
	TextLRScale float32
	// AverageDecay, in (0, 1), makes the additive critic predict with an
	// exponential moving average of its text and scale tables (Polyak
	// averaging, average.go) instead of their last iterate. Default:
	// DefaultAverageDecay; a negative value turns it off (the last
	// iterate). A checkpoint restores into a model
	// with or without the average (without: the average starts at the
	// weights).
	AverageDecay float64
}

// structureOf is a checkpoint's structure: StructureMLP for one written
// before the field existed.
func structureOf(c ModelConfig) string {
	if c.Structure == "" {
		return StructureMLP
	}
	return c.Structure
}

func (c *ModelConfig) setDefaults() {
	if c.Structure == "" {
		c.Structure = StructureAdditive
	}
	switch {
	case c.Structure == StructureMLP:
		c.Rank = 0 // no text factors
	case c.Rank == 0:
		c.Rank = DefaultRank
	}
	if c.RoundWeight == 0 {
		c.RoundWeight = DefaultRoundWeight
	}
	if c.TextLRScale == 0 {
		c.TextLRScale = DefaultTextLRScale
	}
	switch {
	case c.Structure == StructureMLP || c.AverageDecay < 0:
		c.AverageDecay = -1 // off; kept apart from 0 so defaults stay put
	case c.AverageDecay == 0:
		c.AverageDecay = DefaultAverageDecay
	}
	if c.Buckets == 0 {
		c.Buckets = 1 << 18
	}
	if c.CatBuckets == 0 {
		c.CatBuckets = 1024
	}
	// The network gives only the log-variance and the label logits in the
	// additive structure (the mean is the additive part's): a quarter of
	// the width costs a quarter of the table's memory and AdamW time.
	net := 64
	if c.Structure == StructureAdditive {
		net = 16
	}
	if c.Dim == 0 {
		c.Dim = net
	}
	if c.Hidden == 0 {
		c.Hidden = net
	}
	if c.MaxTextBytes == 0 {
		c.MaxTextBytes = 2048
	}
	if c.LR == 0 {
		c.LR = DefaultLR
	}
	switch {
	case c.WeightDecay != 0:
	case c.Structure == StructureAdditive:
		c.WeightDecay = DefaultAdditiveWeightDecay
	default:
		c.WeightDecay = DefaultWeightDecay
	}
	if c.Beta1 == 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
}

func (c *ModelConfig) validate() error {
	if c.Buckets < 1 || c.CatBuckets < 1 || c.Dim < 1 || c.Hidden < 1 || c.MaxTextBytes < 1 {
		return fmt.Errorf("%w: model sizes must be positive (buckets %d, cat %d, dim %d, hidden %d, max text %d)",
			ErrConfig, c.Buckets, c.CatBuckets, c.Dim, c.Hidden, c.MaxTextBytes)
	}
	if c.LR <= 0 {
		return fmt.Errorf("%w: learning rate must be positive", ErrConfig)
	}
	if !(c.WeightDecay >= 0) || math.IsInf(float64(c.WeightDecay), 0) {
		return fmt.Errorf("%w: weight decay %v: want a finite value ≥ 0 (--weight-decay; 0: the structure's default)", ErrConfig, c.WeightDecay)
	}
	switch c.Structure {
	case StructureAdditive:
		if c.Rank < 1 || c.Rank > 64 {
			return fmt.Errorf("%w: rank %d: want 1..64", ErrConfig, c.Rank)
		}
	case StructureMLP:
	default:
		return fmt.Errorf("%w: structure %q: want %s or %s", ErrConfig, c.Structure, StructureAdditive, StructureMLP)
	}
	if c.AverageDecay >= 1 || c.AverageDecay != c.AverageDecay {
		return fmt.Errorf("%w: average decay %v: want a value below 1 (negative: off)", ErrConfig, c.AverageDecay)
	}
	return nil
}

// Example is one training example.
type Example struct {
	Input
	// Effect is the measured effect in [-1, 1].
	Effect float64
	// Label is LabelNegative, LabelNeutral or LabelPositive.
	Label int
	// Round names the example's round (RoundKey): the updates of
	// different evolvers after the same round of the same tasks. Examples
	// of one round in one batch add a within-round term to the loss
	// (lossAndGrad). Empty: none.
	Round string
	// Replay marks an example trained on before (a replay or a later
	// epoch): it trains the network and the text part again, but the
	// additive critic's base (a closed-form fit) does not count it twice.
	Replay bool
	// Precision weighs the example's effect term (the Gaussian NLL) within
	// its batch: each weight is Precision over the batch's mean (0 counts
	// as the mean: unweighted). ExampleOf sets it to the number of paired
	// tasks behind the effect, the precision of a mean of n pairs up to
	// the per-task variance (pooled: a 5-task sample's own variance is too
	// noisy to weight by). The label term is not weighted.
	Precision float64
}

// Prediction is the model's output for one input.
type Prediction struct {
	// Mean is the predicted effect; Std its predicted standard deviation.
	Mean, Std float64
	// Probs are the label probabilities (negative, neutral, positive).
	Probs [3]float64
}

// Losses are a step's mean losses over its batch.
type Losses struct {
	// Total = NLL + CE.
	Total, NLL, CE float64
	// Rank is the within-round term (withinRound), part of Total.
	Rank float64
}

type param struct {
	name       string
	n          int
	p, g, m, v backend.Buffer
	// frozen: not trained by the optimizer (the additive critic's base
	// statistics, which are a tensor only to travel in checkpoints).
	frozen bool
	// lrScale multiplies the learning rate of this tensor (0: 1).
	lrScale float32
}

// Model is the reward model: an EmbeddingBag over hashed n-grams and
// categorical features, a bias and ReLU, a hidden ReLU layer, and five outputs
// (effect mean, log-variance, three label logits), trained with Gaussian NLL
// plus cross-entropy and AdamW. Every tensor op runs on a backend.Backend; the
// loss and its gradient with respect to the batch×5 outputs are computed on the
// host. It is deterministic given its config and seed. Not safe for concurrent
// use.
type Model struct {
	// training: the forward pass in progress is computeGrads' (the whole
	// text part, not the shrunk one predictions use).
	training bool
	be       backend.Backend
	cfg      ModelConfig
	feat     featurizer
	bags     bagMerger
	// rawBags skips the bag merge (benchmarks measure what it saves).
	rawBags bool
	step    int
	// lrAt, when set (SetSchedule), is the learning rate of optimizer step
	// n (1-based), in place of cfg.LR.
	lrAt func(n int) float32

	table, b0, w1, b1, w2, b2 *param
	params                    []*param
	// add is the additive critic's part (nil for StructureMLP).
	add *additive

	capB, capIdx        int
	e, h, o, dO, dh, de backend.Buffer
	idx, off            backend.IntBuffer
	wts                 backend.Buffer
	host                []float32
	means               []float64
}

// NewModel allocates a model on be, initialized deterministically from cfg.Seed.
func NewModel(be backend.Backend, cfg ModelConfig) (*Model, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Model{be: be, cfg: cfg, feat: featurizer{buckets: cfg.Buckets, cat: cfg.CatBuckets, maxText: cfg.MaxTextBytes, crosses: cfg.Crosses, context: cfg.Context}}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	D, H := cfg.Dim, cfg.Hidden
	uniform := func(n int, a float64) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32((r.Float64()*2 - 1) * a)
		}
		return s
	}
	normal := func(n int, sd float64) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(r.NormFloat64() * sd)
		}
		return s
	}
	constant := func(n int, v float32) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = v
		}
		return s
	}
	m.table = m.newParam("embedding", uniform(m.feat.rows()*D, 0.1))
	m.b0 = m.newParam("bias0", constant(D, 0.05))
	m.w1 = m.newParam("w1", normal(D*H, math.Sqrt(2/float64(D))))
	m.b1 = m.newParam("bias1", constant(H, 0.01))
	m.w2 = m.newParam("w2", normal(H*nOut, 0.1/math.Sqrt(float64(H))))
	m.b2 = m.newParam("bias2", make([]float32, nOut))
	if cfg.Structure == StructureAdditive {
		m.newAdditive(uniform)
	}
	return m, nil
}

func (m *Model) newParam(name string, init []float32) *param {
	n := len(init)
	p := &param{name: name, n: n, p: m.be.Alloc(n), g: m.be.Alloc(n), m: m.be.Alloc(n), v: m.be.Alloc(n)}
	m.be.Upload(p.p, init)
	m.params = append(m.params, p)
	return p
}

// TensorBytes is the memory of the model's parameters: weights, gradients
// and both AdamW moments, float32 each.
func (m *Model) TensorBytes() int64 {
	var n int64
	for _, p := range m.params {
		n += int64(p.n) * 4 * 4
	}
	return n
}

// Config returns the model's config with defaults applied.
func (m *Model) Config() ModelConfig { return m.cfg }

// Steps returns the number of optimizer steps taken.
func (m *Model) Steps() int { return m.step }

// SetSchedule makes f(n) the learning rate of optimizer step n (1-based,
// counted by Steps, which State and Restore carry, so a restored model
// continues the schedule); nil restores the constant cfg.LR.
func (m *Model) SetSchedule(f func(n int) float32) { m.lrAt = f }

// LR returns the learning rate the next TrainStep uses.
func (m *Model) LR() float32 {
	if m.lrAt != nil {
		return m.lrAt(m.step + 1)
	}
	return m.cfg.LR
}

// ensure grows the scratch buffers to hold batch rows and nIdx features.
func (m *Model) ensure(batch, nIdx int) {
	D, H := m.cfg.Dim, m.cfg.Hidden
	if batch > m.capB {
		for _, b := range []backend.Buffer{m.e, m.h, m.o, m.dO, m.dh, m.de} {
			if b != nil {
				m.be.Free(b)
			}
		}
		if m.off != nil {
			m.be.FreeInt(m.off)
		}
		m.capB = batch
		m.e, m.de = m.be.Alloc(batch*D), m.be.Alloc(batch*D)
		m.h, m.dh = m.be.Alloc(batch*H), m.be.Alloc(batch*H)
		m.o, m.dO = m.be.Alloc(batch*nOut), m.be.Alloc(batch*nOut)
		m.off = m.be.AllocInt(batch + 1)
	}
	if nIdx > m.capIdx {
		if m.idx != nil {
			m.be.FreeInt(m.idx)
			m.be.Free(m.wts)
		}
		m.capIdx = max(nIdx, 2*m.capIdx)
		m.idx, m.wts = m.be.AllocInt(m.capIdx), m.be.Alloc(m.capIdx)
	}
}

// forward uploads the batch's features and computes the outputs, leaving the
// activations in m.e (post-ReLU), m.h (post-ReLU) and m.o; it returns the
// batch×5 outputs downloaded to the host.
func (m *Model) forward(ins []*Input) []float32 {
	B, D, H := len(ins), m.cfg.Dim, m.cfg.Hidden
	idx := make([]int32, 0, B*256)
	w := make([]float32, 0, B*256)
	off := make([]int32, 1, B+1)
	rows := m.feat.rows()
	for _, in := range ins {
		start := len(idx)
		idx, w = m.feat.features(idx, w, in)
		if !m.rawBags {
			idx, w = m.bags.merge(idx, w, start, rows)
		}
		off = append(off, int32(len(idx)))
	}
	m.ensure(B, len(idx))
	m.be.UploadInt(m.idx, idx)
	m.be.Upload(m.wts, w)
	m.be.UploadInt(m.off, off)
	m.be.EmbeddingBag(m.e, m.table.p, m.idx, m.off, m.wts, B, D)
	m.be.AddRowVector(m.e, m.b0.p, B, D)
	m.be.ReLU(m.e, m.e, B*D)
	m.be.Gemm(false, false, B, H, D, 1, m.e, m.w1.p, 0, m.h)
	m.be.AddRowVector(m.h, m.b1.p, B, H)
	m.be.ReLU(m.h, m.h, B*H)
	m.be.Gemm(false, false, B, nOut, H, 1, m.h, m.w2.p, 0, m.o)
	m.be.AddRowVector(m.o, m.b2.p, B, nOut)
	if cap(m.host) < B*nOut {
		m.host = make([]float32, B*nOut)
	}
	out := m.host[:B*nOut]
	m.be.Download(out, m.o)
	if m.add != nil {
		if cap(m.means) < B {
			m.means = make([]float64, B)
		}
		means := m.means[:B]
		m.add.forward(m.be, m.feat, ins, means, m.training)
		for i, v := range means {
			out[i*nOut] = float32(v)
		}
	}
	return out
}

// lossAndGrad computes the batch's mean losses from the outputs and, when
// grad is non-nil, their gradient with respect to each output (float64 math).
func lossAndGrad(out []float32, ex []Example, grad []float32, roundWeight float64) Losses {
	B := len(ex)
	var l Losses
	// Precision weights, normalised to mean 1 over the batch (an example
	// without one takes the mean of those with one).
	var psum float64
	var pn int
	for i := range ex {
		if p := ex[i].Precision; p > 0 {
			psum += p
			pn++
		}
	}
	pmean := 1.0
	if pn > 0 {
		pmean = psum / float64(pn)
	}
	weight := func(i int) float64 {
		if p := ex[i].Precision; p > 0 {
			return p / pmean
		}
		return 1
	}
	for i := range ex {
		o := out[i*nOut : (i+1)*nOut]
		mean, lv := float64(o[0]), float64(o[1])
		clamped := false
		if lv < logVarMin {
			lv, clamped = logVarMin, true
		} else if lv > logVarMax {
			lv, clamped = logVarMax, true
		}
		d := ex[i].Effect - mean
		iv := math.Exp(-lv)
		w := weight(i)
		l.NLL += w * 0.5 * (lv + d*d*iv)
		mx := math.Max(float64(o[2]), math.Max(float64(o[3]), float64(o[4])))
		var z float64
		var ez [3]float64
		for k := 0; k < 3; k++ {
			ez[k] = math.Exp(float64(o[2+k]) - mx)
			z += ez[k]
		}
		l.CE += math.Log(z) + mx - float64(o[2+ex[i].Label])
		if grad != nil {
			g := grad[i*nOut : (i+1)*nOut]
			g[0] = float32(-w * d * iv / float64(B))
			g[1] = 0
			if !clamped {
				g[1] = float32(w * 0.5 * (1 - d*d*iv) / float64(B))
			}
			for k := 0; k < 3; k++ {
				p := ez[k] / z
				if k == ex[i].Label {
					p -= 1
				}
				g[2+k] = float32(p / float64(B))
			}
		}
	}
	l.NLL /= float64(B)
	l.CE /= float64(B)
	l.Rank = withinRound(out, ex, grad, roundWeight)
	l.Total = l.NLL + l.CE + l.Rank
	return l
}

// withinRound adds the within-round term to grad (when non-nil) and
// returns its mean over the batch: for each round with two or more
// examples in the batch, ½·Σ w·((m_i − m̄) − (y_i − ȳ))² / σ_i², the
// squared error of the forecasts' deviations from their round's mean
// against the effects' deviations, each over the variance σ_i² the model
// predicts for it (as the pooled NLL weighs its errors; no gradient flows
// to the variance from this term). A round's candidates share its tasks,
// their difficulty and the agent's state, so most of the noise of a
// measured effect is the same for all of them; the deviations are free of
// it, and they are what a critic asked to choose among the candidates of
// one round must get right (fixed effects per round, as an econometrician
// would fit them). weight ≤ 0 turns the term off.
func withinRound(out []float32, ex []Example, grad []float32, weight float64) float64 {
	B := len(ex)
	if weight <= 0 {
		return 0
	}
	var rounds map[string][]int
	for i := range ex {
		if ex[i].Round == "" {
			continue
		}
		if rounds == nil {
			rounds = map[string][]int{}
		}
		rounds[ex[i].Round] = append(rounds[ex[i].Round], i)
	}
	var loss float64
	for _, rs := range rounds {
		if len(rs) < 2 {
			continue
		}
		var mm, ym float64
		for _, i := range rs {
			mm += float64(out[i*nOut])
			ym += ex[i].Effect
		}
		mm /= float64(len(rs))
		ym /= float64(len(rs))
		for _, i := range rs {
			lv := math.Min(math.Max(float64(out[i*nOut+1]), logVarMin), logVarMax)
			iv := weight * math.Exp(-lv)
			d := (float64(out[i*nOut]) - mm) - (ex[i].Effect - ym)
			loss += 0.5 * iv * d * d
			if grad != nil {
				// The exact gradient of Σ_j iv_j·d_j²/2 with respect to
				// m_i is iv_i·d_i − mean_round(iv·d); with equal iv the
				// second part is 0.
				grad[i*nOut] += float32(iv * d / float64(B))
			}
		}
		if grad != nil {
			var mean float64
			for _, i := range rs {
				lv := math.Min(math.Max(float64(out[i*nOut+1]), logVarMin), logVarMax)
				mean += weight * math.Exp(-lv) * ((float64(out[i*nOut]) - mm) - (ex[i].Effect - ym))
			}
			mean /= float64(len(rs))
			for _, i := range rs {
				grad[i*nOut] -= float32(mean / float64(B))
			}
		}
	}
	return loss / float64(B)
}

// computeGrads runs forward and backward for batch, leaving the gradients in
// each param's g buffer, and returns the batch's losses before the update.
func (m *Model) computeGrads(batch []Example) Losses {
	B, D, H := len(batch), m.cfg.Dim, m.cfg.Hidden
	ins := make([]*Input, B)
	for i := range batch {
		ins[i] = &batch[i].Input
	}
	m.training = true
	out := m.forward(ins)
	m.training = false
	grad := make([]float32, B*nOut)
	l := lossAndGrad(out, batch, grad, m.cfg.RoundWeight)
	for _, p := range m.params {
		if !p.frozen {
			m.be.Fill(p.g, p.n, 0)
		}
	}
	if m.add != nil {
		// The mean is the additive part's; the network's mean output
		// gets no gradient.
		dMean := make([]float32, B)
		for i := range dMean {
			dMean[i], grad[i*nOut] = grad[i*nOut], 0
		}
		m.add.backward(m.be, dMean)
	}
	m.be.Upload(m.dO, grad)
	// Output layer.
	m.be.Gemm(true, false, H, nOut, B, 1, m.h, m.dO, 0, m.w2.g)
	m.be.SumRows(m.b2.g, m.dO, B, nOut)
	m.be.Gemm(false, true, B, H, nOut, 1, m.dO, m.w2.p, 0, m.dh)
	m.be.ReLUBackward(m.dh, m.dh, m.h, B*H)
	// Hidden layer.
	m.be.Gemm(true, false, D, H, B, 1, m.e, m.dh, 0, m.w1.g)
	m.be.SumRows(m.b1.g, m.dh, B, H)
	m.be.Gemm(false, true, B, D, H, 1, m.dh, m.w1.p, 0, m.de)
	m.be.ReLUBackward(m.de, m.de, m.e, B*D)
	// Embedding bag.
	m.be.SumRows(m.b0.g, m.de, B, D)
	m.be.EmbeddingBagBackward(m.table.g, m.de, m.idx, m.off, m.wts, B, D)
	return l
}

// TrainStep takes one AdamW step on batch, at the learning rate LR returns
// (the schedule's, see SetSchedule), and returns the batch's losses
// measured before the update. An empty batch is a no-op.
func (m *Model) TrainStep(batch []Example) (Losses, error) {
	if len(batch) == 0 {
		return Losses{}, nil
	}
	var shrink shrinkObs
	if m.add != nil {
		shrink = m.add.shrinkBefore(batch)
		m.add.base.observe(m.be, batch)
	}
	l := m.computeGrads(batch)
	if m.add != nil {
		m.add.shrinkAfter(m.be, batch, shrink)
	}
	lr := m.LR()
	m.step++
	c := m.cfg
	for _, p := range m.params {
		if p.frozen {
			continue
		}
		plr := lr
		if p.lrScale > 0 {
			plr *= p.lrScale
		}
		m.be.AdamW(p.p, p.g, p.m, p.v, p.n, plr, c.Beta1, c.Beta2, c.Eps, c.WeightDecay, m.step)
	}
	if m.add != nil && m.add.avg != nil {
		m.add.avg.update(m.be, m.add, m.step)
	}
	if err := m.be.Sync(); err != nil {
		return l, fmt.Errorf("%w: %w", ErrDevice, err)
	}
	if math.IsNaN(l.Total) || math.IsInf(l.Total, 0) {
		return l, fmt.Errorf("%w: loss is %v at step %d", ErrDiverged, l.Total, m.step)
	}
	return l, nil
}

// Predict returns the model's predictions for ins.
func (m *Model) Predict(ins []*Input) []Prediction {
	if len(ins) == 0 {
		return nil
	}
	out := m.forward(ins)
	preds := make([]Prediction, len(ins))
	for i := range ins {
		o := out[i*nOut : (i+1)*nOut]
		lv := math.Min(math.Max(float64(o[1]), logVarMin), logVarMax)
		p := &preds[i]
		p.Mean, p.Std = float64(o[0]), math.Exp(0.5*lv)
		mx := math.Max(float64(o[2]), math.Max(float64(o[3]), float64(o[4])))
		var z float64
		for k := 0; k < 3; k++ {
			p.Probs[k] = math.Exp(float64(o[2+k]) - mx)
			z += p.Probs[k]
		}
		for k := range p.Probs {
			p.Probs[k] /= z
		}
	}
	return preds
}

// Loss returns the batch's losses without updating the model: the
// training objective TrainStep would report (the whole text part).
func (m *Model) Loss(batch []Example) Losses {
	ins := make([]*Input, len(batch))
	for i := range batch {
		ins[i] = &batch[i].Input
	}
	m.training = true
	defer func() { m.training = false }()
	return lossAndGrad(m.forward(ins), batch, nil, m.cfg.RoundWeight)
}

// ParamState is one parameter tensor with its AdamW moments.
type ParamState struct {
	Name    string
	P, M, V []float32
}

// ModelState is a model's full training state (weights, optimizer moments,
// step count); it round-trips through State and Restore.
type ModelState struct {
	Config ModelConfig
	Step   int
	Params []ParamState
}

// State downloads the model's full training state.
func (m *Model) State() ModelState {
	st := ModelState{Config: m.cfg, Step: m.step}
	for _, p := range m.params {
		ps := ParamState{Name: p.name, P: make([]float32, p.n), M: make([]float32, p.n), V: make([]float32, p.n)}
		m.be.Download(ps.P, p.p)
		m.be.Download(ps.M, p.m)
		m.be.Download(ps.V, p.v)
		st.Params = append(st.Params, ps)
	}
	return st
}

// Shape is State without the tensors' data: the config, the step and the
// parameter names (for a checkpoint that streams the tensors).
func (m *Model) Shape() ModelState {
	st := ModelState{Config: m.cfg, Step: m.step}
	for _, p := range m.params {
		st.Params = append(st.Params, ParamState{Name: p.name})
	}
	return st
}

// Tensor returns tensor which (0: P, 1: M, 2: V) of parameter param. On a
// backend with host memory (backend.HostView) it is the tensor's own memory,
// whose contents change with the next training step (read it before then; do
// not keep or change it); otherwise it is downloaded into *buf (grown when
// too small).
func (m *Model) Tensor(param, which int, buf *[]float32) []float32 {
	p := m.params[param]
	src := [3]backend.Buffer{p.p, p.m, p.v}[which]
	if hv, ok := m.be.(backend.HostView); ok {
		return hv.View(src)[:p.n]
	}
	if cap(*buf) < p.n {
		*buf = make([]float32, p.n)
	}
	dst := (*buf)[:p.n]
	m.be.Download(dst, src)
	return dst
}

// Restore uploads st into the model. The shapes must match the model's.
func (m *Model) Restore(st ModelState) error {
	if m.add != nil && len(st.Params) > 0 && st.Params[len(st.Params)-1].Name == "text" {
		// Written before the additive critic's text shrink existed: its
		// sums start empty (α = 1, the text part whole, as it predicted).
		n := m.add.shrink.param.n
		st.Params = append(slices.Clone(st.Params), ParamState{Name: "shrink", P: make([]float32, n), M: make([]float32, n), V: make([]float32, n)})
	}
	st.Params = m.matchAverage(st.Params)
	if len(st.Params) != len(m.params) {
		return fmt.Errorf("%w: %d tensors, model has %d", ErrIncompatible, len(st.Params), len(m.params))
	}
	if st.Config.Crosses != m.cfg.Crosses {
		return fmt.Errorf("%w: weights trained with feature crosses %v, model configured with %v", ErrIncompatible, st.Config.Crosses, m.cfg.Crosses)
	}
	if structureOf(st.Config) != m.cfg.Structure || st.Config.Rank != m.cfg.Rank {
		return fmt.Errorf("%w: weights of a %s model (rank %d), model configured as %s (rank %d)", ErrIncompatible, structureOf(st.Config), st.Config.Rank, m.cfg.Structure, m.cfg.Rank)
	}
	if st.Config.Context != m.cfg.Context {
		return fmt.Errorf("%w: weights trained with context features %v, model configured with %v", ErrIncompatible, st.Config.Context, m.cfg.Context)
	}
	for i, p := range m.params {
		ps := st.Params[i]
		if ps.Name != p.name || len(ps.P) != p.n || len(ps.M) != p.n || len(ps.V) != p.n {
			return fmt.Errorf("%w: tensor %d is %s[%d], model has %s[%d]", ErrIncompatible, i, ps.Name, len(ps.P), p.name, p.n)
		}
	}
	for i, p := range m.params {
		ps := st.Params[i]
		m.be.Upload(p.p, ps.P)
		m.be.Upload(p.m, ps.M)
		m.be.Upload(p.v, ps.V)
		if m.add != nil && p == m.add.base.param {
			m.add.base.restore(ps.P)
		}
		if m.add != nil && p == m.add.shrink.param {
			m.add.shrink.restore(ps.P)
		}
	}
	m.step = st.Step
	return nil
}

func argmax(p [3]float64) int {
	best := 0
	for k := 1; k < 3; k++ {
		if p[k] > p[best] {
			best = k
		}
	}
	return best
}
