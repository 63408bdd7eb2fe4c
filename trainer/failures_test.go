package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/trainer/backend"
)

// savedStore writes n checkpoints of one small model into a fresh store
// and returns it with their paths, oldest first.
func savedStore(t *testing.T, n int) (*CheckpointStore, []string) {
	t.Helper()
	m, err := NewModel(backend.NewCPU(), tinyConfig(4))
	if err != nil {
		t.Fatal(err)
	}
	s := &CheckpointStore{dir: t.TempDir(), keep: n + 1, log: zerolog.Nop()}
	var paths []string
	for i := 1; i <= n; i++ {
		ck := &Checkpoint{Index: int64(i), ModelVersion: "t-v" + string(rune('0'+i)), Step: int64(i), Topic: "hf.samples",
			Offsets: map[int32]int64{0: int64(i)}, CreatedAt: time.Date(2026, 12, 7, 0, 0, i, 0, time.UTC), Models: []ModelState{m.State()}}
		p, err := s.Save(ck)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return s, paths
}

// TestReadCheckpointTellsIOFromCorruption: a missing file reads as
// fs.ErrNotExist, a file that cannot be read (a directory in its place) as
// that read error, and neither as ErrCorrupt; a truncated file is corrupt,
// with the cause kept.
func TestReadCheckpointTellsIOFromCorruption(t *testing.T) {
	t.Parallel()
	_, paths := savedStore(t, 1)
	dir := filepath.Dir(paths[0])
	if _, err := ReadCheckpoint(filepath.Join(dir, FileName(9))); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist and not ErrCorrupt", err)
	}
	unreadable := filepath.Join(dir, FileName(8))
	if err := os.Mkdir(unreadable, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCheckpoint(unreadable); err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("a directory: %v, want its read error and not ErrCorrupt", err)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths[0], b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCheckpoint(paths[0]); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated file: %v, want ErrCorrupt saying truncated", err)
	}
}

// TestLoadLatestFallsBackOnlyPastCorruption: a corrupt newest checkpoint
// falls back to the older one; a newest one that cannot be read (it may be
// whole: a permission or I/O error) stops the load with its path and
// cause instead of silently undoing the training it holds.
func TestLoadLatestFallsBackOnlyPastCorruption(t *testing.T) {
	t.Parallel()
	s, paths := savedStore(t, 2)
	if err := os.WriteFile(paths[1], []byte("not a checkpoint at all, longer than a header............................"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck, path, err := s.LoadLatest()
	if err != nil || path != paths[0] || ck.Index != 1 {
		t.Fatalf("corrupt newest: loaded %s, %v; want the older %s", path, err, paths[0])
	}
	if err := os.Remove(paths[1]); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(paths[1], 0o755); err != nil {
		t.Fatal(err)
	}
	ck, path, err = s.LoadLatest()
	if err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoCheckpoint) ||
		!strings.Contains(err.Error(), paths[1]) || !strings.Contains(err.Error(), "not falling back") {
		t.Fatalf("unreadable newest: loaded %s (%v), %v; want an error naming %s and not falling back", path, ck != nil, err, paths[1])
	}
}

// panickyBackend is the CPU backend whose matrix products panic while armed,
// as a backend fault would in the middle of scoring.
type panickyBackend struct {
	backend.Backend
	armed atomic.Bool
}

func (p *panickyBackend) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b backend.Buffer, beta float32, c backend.Buffer) {
	if p.armed.Load() {
		panic("injected backend fault")
	}
	p.Backend.Gemm(transA, transB, m, n, k, alpha, a, b, beta, c)
}

// TestServingPanicLeavesTrainingRunning: a panic while /v1/score scores
// (net/http recovers it and drops the connection) releases the training
// lock, so that the next request is answered and training goes on; the
// lock used to be released by hand after scoring. Both paths: the published
// checkpoint, and an older one pinned.
func TestServingPanicLeavesTrainingRunning(t *testing.T) {
	t.Parallel()
	be := &panickyBackend{Backend: backend.NewCPU()}
	tr, err := New(Config{Brokers: []string{"127.0.0.1:1"}, ClickHouse: "127.0.0.1:1", Name: "panic", CheckpointDir: t.TempDir(),
		Listen: "off", Device: "cpu", Model: smallModel()}, WithLogger(zerolog.Nop()), WithBackend(be))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(tr.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the recovered panic's stack
	srv.Start()
	defer srv.Close()
	publishCheckpoint(t, tr)
	publishCheckpoint(t, tr) // v1 is now pinned from its file (servePinned)
	c := srv.Client()
	for _, pin := range []string{"", "?model_version=" + tr.cfg.Name + "-v1"} {
		be.armed.Store(true)
		body, err := json.Marshal(ScoreRequest{Input: servingInput})
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := c.Post(srv.URL+"/v1/score"+pin, "application/json", bytes.NewReader(body)); err == nil {
			resp.Body.Close()
			t.Fatalf("score%s answered %s while the backend panicked: the fault was not injected", pin, resp.Status)
		}
		be.armed.Store(false)
		locked := make(chan struct{})
		go func() {
			trainStep(t, tr) // takes the training lock
			close(locked)
		}()
		select {
		case <-locked:
		case <-time.After(10 * time.Second):
			t.Fatalf("after a panic while scoring%s, a training step still waits for the lock after 10s", pin)
		}
		if s := scoreAt(t, c, srv.URL, pin); s.ModelVersion == "" {
			t.Fatalf("after the panic, score%s names no version", pin)
		}
	}
}
