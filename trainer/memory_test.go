package trainer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// memVocab is the words of the realistic samples' updates.
var memVocab = strings.Fields(`verify run tests before answering read the failing output first plan each step
keep a scratch file of hypotheses prefer small diffs check imports memoize expensive calls skip flaky tests
retry network calls with backoff compare against the baseline log every decision reproduce the bug write a
regression test summarise the evidence cite the task ids grep the repository for usages avoid global state`)

// memSample is sample i of a realistic stream, as the processors write
// them: a 32-hex sample id, a markdown update of about 1–2 KB, an evidence
// query of 40–100 per-task lines (2–4 KB), spread over 240 cells of 5
// campaigns (seeds and cycles growing), so many cells, rounds and held-out
// groups. Every sample is encoded and decoded as the partition reader does,
// so its strings are the decoder's, not the generator's.
func memSample(t testing.TB, r *rand.Rand, i int) *schemas.LabeledSample {
	t.Helper()
	sum := sha256.Sum256([]byte("sample|" + strconv.Itoa(i)))
	id := hex.EncodeToString(sum[:16])
	cell := i % 240
	camp, ev, ag, bm := cell%5, cell/5%4, cell/20%4, cell/80
	cycle := i / 240
	var up strings.Builder
	fmt.Fprintf(&up, "### skill skill-%d (add)\n---\nname: skill-%d\ndescription: how to handle cycle %d of camp-%d\n---\n", i, i, cycle, camp)
	for up.Len() < 1024+r.IntN(1024) {
		fmt.Fprintf(&up, "\n## %s %s\n\n", memVocab[r.IntN(len(memVocab))], memVocab[r.IntN(len(memVocab))])
		for k := 0; k < 2+r.IntN(4); k++ {
			up.WriteString("- ")
			for w := 0; w < 6+r.IntN(8); w++ {
				up.WriteString(memVocab[r.IntN(len(memVocab))])
				up.WriteByte(' ')
			}
			up.WriteByte('\n')
		}
	}
	var q strings.Builder
	fmt.Fprintf(&q, "evidence for cell-%03d cycle %d\n", cell, cycle)
	for k, n := 0, 40+r.IntN(60); k < n; k++ {
		status, score := "pass", 1
		if r.IntN(3) == 0 {
			status, score = "fail", 0
		}
		fmt.Fprintf(&q, "task task-%04d: %s score=%d attempts=%d\n", (cycle*7+k)%5000, status, score, 1+r.IntN(3))
	}
	eff := r.NormFloat64() * 0.05
	label := LabelNames[LabelNeutral]
	switch {
	case eff > 0.05:
		label = LabelNames[LabelPositive]
	case eff < -0.05:
		label = LabelNames[LabelNegative]
	}
	s := &schemas.LabeledSample{
		SampleID: id, UpdateID: "u-" + id, CellID: fmt.Sprintf("cell-%03d", cell), CampaignID: fmt.Sprintf("camp-%d", camp),
		Benchmark: []string{"swe", "terminal", "tau"}[bm], AgentModel: fmt.Sprintf("agent-%d", ag), EvolverModel: fmt.Sprintf("evolver-%d", ev),
		Cycle: int32(cycle), Seed: int32(cycle % 9), Query: q.String(), Update: up.String(), ArtifactKind: "skill",
		Effect: eff, Label: label, NBefore: 5, NAfter: 5, CILow: eff - 0.1, CIHigh: eff + 0.1, PValue: 0.5, Reason: "test",
		HarnessVersion: fmt.Sprintf("h%d", cycle+1), HarnessVersionIndex: int32(cycle + 1), Route: schemas.RouteInSitu,
		ProducedAt: time.UnixMilli(1_700_000_000_000 + int64(i)).UTC(),
	}
	s.EventID, s.EventTime, s.Project, s.Source = id, s.ProducedAt, schemas.DefaultProject, "test"
	b, err := schemas.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	ev2, err := schemas.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return ev2.(*schemas.LabeledSample)
}

// memStream feeds the realistic stream to a trainer's intake, step and
// replay round (trainBatch, as the loop calls it) in batches of batch, with
// a redelivery of an earlier sample every 50 and a correction (same id,
// other figures) every 200, dropping the buffered trainer_steps rows as a
// flush would, and writing (and serving) a checkpoint every 1 000 samples.
type memStream struct {
	r     *rand.Rand
	next  int
	off   int64
	batch int
}

func newMemStream(batch int) *memStream {
	return &memStream{r: rand.New(rand.NewPCG(7, 11)), batch: batch}
}

// feed pushes the stream's next n samples through tr.
func (m *memStream) feed(t testing.TB, tr *Trainer, n int) {
	t.Helper()
	var buf []sampleMsg
	push := func(s *schemas.LabeledSample) {
		buf = append(buf, sampleMsg{part: 0, off: m.off, s: s})
		m.off++
	}
	for end := m.next + n; m.next < end; m.next++ {
		i := m.next
		s := memSample(t, m.r, i)
		push(s)
		if i%50 == 49 { // a redelivery of an earlier sample
			push(memSample(t, rand.New(rand.NewPCG(7, 11)), 0))
		}
		if i%200 == 199 { // a correction: other figures under the same id
			c := *s
			c.Effect, c.NAfter = -c.Effect, c.NAfter+1
			push(&c)
		}
		if len(buf) >= m.batch || i == end-1 {
			if err := tr.trainBatch(context.Background(), buf, false); err != nil {
				t.Fatal(err)
			}
			buf = nil
			tr.rows = nil // flushed
		}
		if i%1000 == 999 {
			if err := tr.checkpoint(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// liveHeap is the heap in use after two full collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// memTrainer is the trainer of the memory measurements: the small model
// (its tensors are a fixed cost), the default windows unless mod changes
// them, held-out groups at the default fraction, replays on.
func memTrainer(t testing.TB, mod func(*Config)) *Trainer {
	return replayTrainer(t, nil, func(c *Config) {
		c.HeldoutFraction, c.BatchSize, c.ReplayBatchSize, c.ReplayRatio = 0, 64, 64, 0.5
		if mod != nil {
			mod(c)
		}
	})
}

// heapAfter feeds st's next n samples to tr and returns the live heap
// then (full) and, once tr's windows are emptied (dropWindows: the replay
// window, the evaluation's training window, the held-out ring and the
// frozen evaluation set), the live heap without them (rest). With
// HF_MEMPROFILE set to a directory, a heap profile of the full heap is
// written there (heap-<samples fed>.pprof).
func heapAfter(t testing.TB, tr *Trainer, st *memStream, n int) (full, rest uint64) {
	t.Helper()
	if os.Getenv("HF_MEMPROFILE") != "" && runtime.MemProfileRate != 4096 {
		runtime.MemProfileRate = 4096
	}
	start := time.Now()
	st.feed(t, tr, n)
	full = liveHeap()
	if dir := os.Getenv("HF_MEMPROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%d.pprof", st.next)))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	t.Logf("after %d samples: live heap %.2f MiB; trained %d, held-out ring %d, evaluation set %d, replay window %d, eval training window %d, dedup window %d, cells %d (fed %d in %s)",
		st.next, float64(full)/(1<<20), tr.trained, tr.heldSet.len(), len(tr.evalSet.rows), tr.window.len(), tr.trainWin.len(),
		tr.dedup.len(), len(tr.cells), n, time.Since(start).Round(time.Millisecond))
	held, text := windowSamples(tr)
	dropWindows(tr)
	rest = liveHeap()
	t.Logf("after %d samples: the windows hold %d distinct samples in %.2f MiB (%.0f B each, of which %.0f B update and query text); the rest %.2f MiB",
		st.next, held, float64(full-rest)/(1<<20), float64(full-rest)/float64(max(held, 1)), float64(text)/float64(max(held, 1)), float64(rest)/(1<<20))
	return full, rest
}

// windowSamples counts the distinct samples tr's windows hold and the
// bytes of their update and query texts.
func windowSamples(tr *Trainer) (n, text int) {
	seen := map[string]bool{}
	note := func(update, query string) {
		if !seen[update] {
			seen[update] = true
			text += len(update) + len(query)
		}
	}
	for _, r := range [][]*schemas.LabeledSample{tr.trainWin.snapshot(), tr.heldSet.snapshot(), tr.evalSet.rows} {
		for _, s := range r {
			note(s.Update, s.Query)
		}
	}
	for _, ex := range tr.window.snapshot() {
		note(ex.Update, ex.Query)
	}
	return len(seen), text
}

// dropWindows empties tr's windows (and the replays' scratch batch).
func dropWindows(tr *Trainer) {
	tr.window, tr.replayBuf = newReplayWindow(tr.cfg.ReplayWindow), nil
	tr.trainWin, tr.heldSet = newSampleRing(tr.cfg.EvalTrainWindow), newSampleRing(tr.cfg.HeldoutWindow)
	tr.evalSet.rows = nil
}

// retained is the live heap of a fresh trainer (memTrainer with mod) after
// n samples of the realistic stream, with its windows and without them,
// less the live heap before it was built.
func retained(t testing.TB, n int, mod func(*Config)) (full, rest float64) {
	t.Helper()
	before := liveHeap()
	tr := memTrainer(t, mod)
	f, r := heapAfter(t, tr, newMemStream(64), n)
	runtime.KeepAlive(tr)
	return float64(f) - float64(before), float64(r) - float64(before)
}

// BenchmarkRetainedHeap is the measurement (a benchmark, so tests do not
// run it): the live heap a trainer at the default windows retains after
// 4 000 and 40 000 samples of the realistic stream, with and without its
// windows.
// [HF_MEMPROFILE=dir] go test -run '^$' -bench RetainedHeap -benchtime 1x ./trainer/ -v
func BenchmarkRetainedHeap(b *testing.B) {
	var rest [2]float64
	for i, n := range []int{4000, 40000} {
		f, r := retained(b, n, nil)
		rest[i] = r
		b.Logf("N=%d: the trainer retains %.1f MiB (%.0f B per sample), %.1f MiB without its windows", n, f/(1<<20), f/float64(n), r/(1<<20))
	}
	per := (rest[1] - rest[0]) / 36000
	b.Logf("beyond the windows: %.1f B per sample between N=4000 and N=40000", per)
	b.ReportMetric(per, "B/sample-beyond-windows")
}

// TestRetainedHeapPerSampleIsBounded: what the trainer keeps per consumed
// sample beyond its bounded windows is small. Two trainers with windows
// small enough to be full after the first 2 000 samples are fed 2 000 and
// 12 000 samples of the realistic stream; with their windows emptied, the
// difference of their live heaps over the 10 000 samples between is the
// state that grows with the stream: the dedup window's entries (16 bytes
// in its ring; its map's slots are allocated up front up to 65 536
// entries), about 16 B per sample, where the window of key strings it
// replaced took about 100 B (32-hex sample ids).
func TestRetainedHeapPerSampleIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds 14 000 samples")
	}
	small := func(c *Config) {
		c.ReplayWindow, c.EvalTrainWindow, c.HeldoutWindow, c.EarlyStopRows, c.ReplayRatio = 400, 400, 100, 32, 0.25
	}
	n1, n2 := 2000, 12000
	if raceEnabled {
		// The race detector makes each sample about 5× slower: fewer. The
		// ring of digests grows by doubling; at 1 000 and 8 000 entries it
		// is 97.7 % full (of 1 024 and 8 192), so its spare capacity does
		// not count as growth.
		n1, n2 = 1000, 8000
	}
	_, r1 := retained(t, n1, small)
	_, r2 := retained(t, n2, small)
	per := (r2 - r1) / float64(n2-n1)
	t.Logf("retained beyond the windows: %.1f B per sample (%.2f MiB after %d samples, %.2f MiB after %d)", per, r1/(1<<20), n1, r2/(1<<20), n2)
	const bound = 40
	if per > bound {
		t.Fatalf("the trainer retains %.0f B per consumed sample beyond its windows; want ≤ %d", per, bound)
	}
}

// TestDedupWindowEntryIsCompact: a full dedup window at the default
// capacity costs about 50 B of live heap per entry (16 in its ring, the
// rest its map's slots), whatever the keys' length.
func TestDedupWindowEntryIsCompact(t *testing.T) {
	n := DefaultConfig().DedupWindow
	revs := make([]string, n+n/2) // sample revisions of 32-hex ids, as intake keys them
	for i := range revs {
		sum := sha256.Sum256([]byte(strconv.Itoa(i)))
		revs[i] = hex.EncodeToString(sum[:16]) + "\x00" + strconv.FormatUint(math.Float64bits(float64(i)/1e4), 36) + "/neutral/5/5"
	}
	before := liveHeap()
	d := newDedup(n, nil, false)
	for _, r := range revs {
		d.add(projectKey(schemas.DefaultProject, r))
	}
	per := (float64(liveHeap()) - float64(before)) / float64(n)
	if d.len() != n || !d.hasSample(schemas.DefaultProject, revs[len(revs)-1]) || d.hasSample(schemas.DefaultProject, revs[0]) {
		t.Fatalf("window holds %d, want %d with the newest key", d.len(), n)
	}
	runtime.KeepAlive(d)
	runtime.KeepAlive(revs)
	t.Logf("a full dedup window of %d entries: %.1f B per entry", n, per)
	if per > 80 {
		t.Fatalf("a dedup window entry costs %.0f B; want ≤ 80", per)
	}
}

// TestDedupWindowSurvivesCheckpoint: the dedup window of digests goes
// through a checkpoint file and back (restoreDedup) as it was, so a
// restored trainer skips every sample it remembered (a redelivery is not
// trained twice) and trains a correction; a file written before the
// digests (keys in Recent) restores to the same window.
func TestDedupWindowSurvivesCheckpoint(t *testing.T) {
	t.Parallel()
	tr := memTrainer(t, func(c *Config) { c.HeldoutFraction = -1 })
	st := newMemStream(16)
	st.feed(t, tr, 48)
	if err := tr.checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	ck, _, err := tr.store.LoadLatest()
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.Recent) != 0 || len(ck.RecentDigests) != dedupDigestLen*tr.dedup.len() || ck.RecentLegacy != 0 {
		t.Fatalf("checkpoint holds %d keys and %d digest bytes (%d legacy); want %d digests", len(ck.Recent), len(ck.RecentDigests), ck.RecentLegacy, tr.dedup.len())
	}
	back := restoreDedup(tr.cfg.DedupWindow, ck)
	if !bytes.Equal(back.ordered(), tr.dedup.ordered()) {
		t.Fatal("the restored dedup window differs from the saved one")
	}
	again := memTrainer(t, func(c *Config) { c.HeldoutFraction = -1 })
	again.dedup = back
	var batch []sampleMsg
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 48 {
		batch = append(batch, sampleMsg{off: int64(i), s: memSample(t, r, i)})
	}
	fixed := *batch[5].s
	fixed.Effect += 0.01
	batch = append(batch, sampleMsg{off: 48, s: &fixed})
	in, err := again.intake(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if in.dup != 48 || len(in.train) != 1 || in.ids[0] != fixed.SampleID {
		t.Fatalf("restored window: %d duplicates and %d trained (%v); want the 48 remembered skipped and the correction trained", in.dup, len(in.train), in.ids)
	}
	// A file written before the digests: keys in Recent.
	keys := []string{projectKey("p", "a"), projectKey("p", "b")}
	old := restoreDedup(10, &Checkpoint{Recent: keys, KeyedByProject: true})
	if !bytes.Equal(old.ordered(), newDedup(10, keys, false).ordered()) || !old.hasSample("p", "b") || old.hasSample("q", "b") {
		t.Fatal("a checkpoint's keys restore to another window")
	}
}
