package trainer

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/harnessflow/harnessflow/schemas"
)

// Checkpoint is the trainer's durable state: the weights and optimizer state
// of every ensemble member, the step, the model version and the Kafka frontier
// (for each partition of Topic, the offset after the last sample folded into
// these weights), plus the dedup window and staleness state, so a restart
// continues exactly where the checkpoint left off, and the evaluation's
// state (its set and epoch, the held-out samples since, its training window,
// the early-stopping state), so a restart evaluates on the same rows.
type Checkpoint struct {
	// Index is the model version number; it only grows, also across fallbacks.
	Index int64
	// ModelVersion is "<trainer>-v<Index>".
	ModelVersion string
	// Step is the number of trainer steps taken (steps on newly admitted
	// samples; each model state carries its optimizer steps, replays
	// included).
	Step int64
	// SamplesTrained counts the samples trained into the weights.
	SamplesTrained int64
	// Topic is the sample topic the offsets refer to.
	Topic string
	// Offsets maps a partition to the next offset to read.
	Offsets map[int32]int64
	// RecentDigests is the dedup window, oldest first: dedupDigestLen (16)
	// bytes per key (the first 16 bytes of the key's sha256; stats.go), of
	// which the oldest RecentLegacy are bare sample ids of a checkpoint
	// written before the keys held the project (legacyKey).
	RecentDigests []byte
	RecentLegacy  int
	// Recent is the dedup window of files written before RecentDigests,
	// oldest first: keys of (project, sample revision or id) (projectKey),
	// or bare sample ids when KeyedByProject is false. Restored when
	// RecentDigests is empty; new files leave it empty (a binary older
	// than RecentDigests restores their window empty).
	Recent []string
	// CellVersions is the latest harness_version_index seen per (project,
	// cell) (keys are projectKey's), or per cell id when KeyedByProject is
	// false.
	CellVersions map[string]int32
	// KeyedByProject says Recent and CellVersions hold the project (issue
	// 35); false in files written before, whose bare sample ids are
	// matched in every project until they age out and whose cell versions
	// are dropped on restore.
	KeyedByProject bool
	// Project is the project whose samples the weights are trained on
	// (Config.Project); AllProjects ("") for a trainer of every project's
	// samples, and in files written before trainers had a project (which
	// all were). Restore refuses a checkpoint of another project.
	Project string
	// Heldout is the held-out evaluation window.
	Heldout []HeldoutRecord
	// FirstGroup is the held-out group trained on because it came first
	// (Trainer.holdOut); "" when there is none. Absent in older files.
	FirstGroup string
	// EvalWindows says the evaluation state below is in the file (issue
	// 36); false in files written before, which restore with it empty.
	EvalWindows bool
	// EvalEpoch, EvalSet and EvalSetSHA256 are the evaluation epoch this
	// checkpoint is evaluated in (1, 2, …; 0: no set frozen yet), its set
	// of held-out samples, oldest first, and the set's name (evalset.go).
	EvalEpoch     int64
	EvalSet       []*schemas.LabeledSample
	EvalSetSHA256 string
	// EvalSince counts the held-out samples collected since EvalSet was
	// frozen; EvalPending are the newest HeldoutWindow of them, oldest
	// first (with EvalSet they are the held-out ring).
	EvalSince   int64
	EvalPending []*schemas.LabeledSample
	// EvalTrain is the evaluation's training window, oldest first: the
	// last EvalTrainWindow trained samples, which the baselines of this
	// checkpoint's evaluation are fitted on (and the replay window's
	// samples, restored from its newest ReplayWindow).
	EvalTrain []*schemas.LabeledSample
	// EarlyStop is the replays' early-stopping state (replay.go).
	EarlyStop EarlyStopState
	// CreatedAt is when the checkpoint was written.
	CreatedAt time.Time
	// Models are the ensemble members' states (weights travel after the
	// gob-encoded header of the file, not through gob).
	Models []ModelState

	// tensor, when set, supplies tensor which (0: P, 1: M, 2: V) of
	// parameter param of model model as Save writes it, in place of
	// Models' data (which is then absent: names, configs and steps only).
	// The trainer streams its live models through it, one tensor at a time,
	// instead of copying every tensor first.
	tensor func(model, param, which int) []float32

	// path and fileSHA256 are the file's path and the lowercase hex sha256
	// of its bytes, set by Save and ReadCheckpoint (not part of the file).
	path, fileSHA256 string
}

// Path is the checkpoint file's path: where Save wrote it or ReadCheckpoint
// read it ("" for a checkpoint not saved or read).
func (ck *Checkpoint) Path() string { return ck.path }

// FileSHA256 is the lowercase hex sha256 of the checkpoint file's bytes,
// header included (what `sha256sum` prints for the file), as Save wrote it
// or ReadCheckpoint read it; "" for a checkpoint not saved or read.
func (ck *Checkpoint) FileSHA256() string { return ck.fileSHA256 }

// File layout: magic (8 bytes) | format version (u32) | payload length (u64) |
// sha256 of payload (32 bytes) | payload. Payload: meta length (u32) | gob of
// the Checkpoint with tensor data stripped | every tensor's P, M, V as
// little-endian float32 in order (each preceded by its u32 length).
const (
	ckptMagic   = "HFCKPT\x00\x01"
	ckptFormat  = 1
	ckptHdrLen  = 8 + 4 + 8 + 32
	ckptPrefix  = "ckpt-"
	ckptSuffix  = ".hfck"
	ckptTempPfx = ".tmp-"
)

// CheckpointStore keeps checkpoints in a directory: atomic writes (temp file,
// fsync, rename, directory fsync), the newest Keep files retained, and loads
// that fall back from a corrupt newest file to the previous valid one. Not
// safe for concurrent use.
type CheckpointStore struct {
	dir  string
	keep int
	log  zerolog.Logger
	// PinRetention keeps a checkpoint beyond the newest Keep for this long
	// after its last Pin (a request that pinned its version), at most
	// MaxPinnedKept of them. 0: pins do not retain.
	PinRetention time.Duration
	// mu orders Pin (serving) with prune (training).
	mu sync.Mutex
}

// MaxPinnedKept bounds the pinned checkpoints kept beyond the newest Keep
// (the newest pinned ones stay): a client that pins every version as it is
// published cannot fill the disk.
const MaxPinnedKept = 8

// pinSuffix names a checkpoint's pin marker: its mtime is its last Pin.
const pinSuffix = ".pinned"

// Pin records that checkpoint index answered a pinned request now: prune
// keeps it for PinRetention from now, however many newer ones there are.
// It fails when the checkpoint is gone.
func (s *CheckpointStore) Pin(index int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := filepath.Join(s.dir, FileName(index))
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("pin checkpoint %d: %w", index, err)
	}
	now := time.Now()
	if err := os.Chtimes(path+pinSuffix, now, now); err == nil {
		return nil
	}
	f, err := os.OpenFile(path+pinSuffix, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pin checkpoint %d: %w", index, err)
	}
	return f.Close()
}

// pinnedUntil is when checkpoint path's pin lapses (zero without one).
func (s *CheckpointStore) pinnedUntil(path string) time.Time {
	fi, err := os.Stat(path + pinSuffix)
	if err != nil || s.PinRetention <= 0 {
		return time.Time{}
	}
	return fi.ModTime().Add(s.PinRetention)
}

// NewCheckpointStore returns a store on dir (created if missing) that keeps
// the newest keep checkpoints (keep < 1 means 3). Of the options it reads
// only WithLogger (default: obs.NewLogger("trainer")).
func NewCheckpointStore(dir string, keep int, opts ...Option) (*CheckpointStore, error) {
	if keep < 1 {
		keep = 3
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint dir: %w", err)
	}
	o := collect(opts)
	return &CheckpointStore{dir: dir, keep: keep, log: o.logger("trainer")}, nil
}

// FileName returns the file name of checkpoint index i.
func FileName(i int64) string { return fmt.Sprintf("%s%012d%s", ckptPrefix, i, ckptSuffix) }

// list returns the checkpoint files' indices, newest first.
func (s *CheckpointStore) list() ([]int64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []int64
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, ckptPrefix) || !strings.HasSuffix(n, ckptSuffix) {
			continue
		}
		i, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(n, ckptPrefix), ckptSuffix), 10, 64)
		if err == nil {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] > out[b] })
	return out, nil
}

// MaxIndex returns the highest checkpoint index present, valid or not (0 when
// none), so that a new version never reuses the number of a corrupt file.
func (s *CheckpointStore) MaxIndex() int64 {
	l, _ := s.list()
	if len(l) == 0 {
		return 0
	}
	return l[0]
}

// Save writes ck as FileName(ck.Index) atomically, then deletes all but the
// newest Keep checkpoints. It returns the file's path and records it and the
// file's sha256 in ck (Path, FileSHA256). The file hash covers the header,
// which holds the payload's hash, so it takes a second read of the file
// (from the page cache, before the rename).
func (s *CheckpointStore) Save(ck *Checkpoint) (string, error) {
	final := filepath.Join(s.dir, FileName(ck.Index))
	tmp, err := os.CreateTemp(s.dir, ckptTempPfx+"*")
	if err != nil {
		return "", fmt.Errorf("checkpoint temp file: %w", err)
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(make([]byte, ckptHdrLen)); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, h), 1<<20)
	n, err := encodePayload(bw, ck)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	hdr := make([]byte, 0, ckptHdrLen)
	hdr = append(hdr, ckptMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, ckptFormat)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(n))
	hdr = h.Sum(hdr)
	if _, err := tmp.WriteAt(hdr, 0); err != nil {
		return "", fmt.Errorf("write checkpoint header: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("fsync checkpoint: %w", err)
	}
	fh := sha256.New()
	if _, err := io.Copy(fh, io.NewSectionReader(tmp, 0, ckptHdrLen+n)); err != nil {
		return "", fmt.Errorf("hash checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("close checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("rename checkpoint: %w", err)
	}
	tmp = nil
	if err := syncDir(s.dir); err != nil {
		return "", err
	}
	ck.path, ck.fileSHA256 = final, hex.EncodeToString(fh.Sum(nil))
	s.prune()
	return final, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open checkpoint dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync checkpoint dir: %w", err)
	}
	return nil
}

// prune removes all but the newest keep checkpoints — except those pinned
// within PinRetention — and stale temp files and pin markers.
func (s *CheckpointStore) prune() {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, _ := s.list()
	now := time.Now()
	pinned := 0
	for i, idx := range l {
		path := filepath.Join(s.dir, FileName(idx))
		if i < s.keep {
			continue
		}
		until := s.pinnedUntil(path)
		if now.Before(until) && pinned < MaxPinnedKept {
			pinned++
			s.log.Debug().Str("checkpoint", path).Time("pinned_until", until).Msg("kept beyond --checkpoint-keep: a request pinned its version")
			continue
		}
		_ = os.Remove(path)
		_ = os.Remove(path + pinSuffix)
	}
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		name := filepath.Join(s.dir, e.Name())
		if strings.HasPrefix(e.Name(), ckptTempPfx) {
			_ = os.Remove(name)
		}
		if base, ok := strings.CutSuffix(name, pinSuffix); ok {
			if _, err := os.Stat(base); errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(name)
			}
		}
	}
}

// LoadLatest returns the newest valid checkpoint and its path, logging a
// warning for each newer file that is corrupt ("checkpoint X is corrupt (...);
// falling back to Y"). It returns ErrNoCheckpoint when none is valid, and the
// error of a newer file that could not be read (permissions, I/O) without
// falling back past it.
func (s *CheckpointStore) LoadLatest() (*Checkpoint, string, error) {
	l, err := s.list()
	if err != nil {
		return nil, "", err
	}
	var bad []string
	for i, idx := range l {
		path := filepath.Join(s.dir, FileName(idx))
		ck, err := ReadCheckpoint(path)
		if err == nil {
			if len(bad) > 0 {
				s.log.Warn().Strs("corrupt", bad).Str("using", path).Msg("fell back to an older checkpoint")
			}
			return ck, path, nil
		}
		if !errors.Is(err, ErrCorrupt) {
			// The file may be whole: falling back would silently undo
			// training. The operator fixes the file system and restarts.
			return nil, "", fmt.Errorf("%w (not falling back to an older checkpoint: the file may be whole; fix its permissions or the file system and restart)", err)
		}
		next := "no checkpoint (starting from scratch)"
		if i+1 < len(l) {
			next = filepath.Join(s.dir, FileName(l[i+1]))
		}
		s.log.Warn().Err(err).Str("checkpoint", path).Str("fallback", next).
			Msgf("checkpoint %s is corrupt (%v); falling back to %s", path, err, next)
		bad = append(bad, path)
	}
	return nil, "", ErrNoCheckpoint
}

// ReadCheckpoint reads and verifies one checkpoint file and records its path
// and sha256 in the result (Path, FileSHA256). A file that fails its
// integrity checks (truncated, bad magic or format, a payload that does not
// decode, a sha256 mismatch) gives an error wrapping ErrCorrupt; a file that
// cannot be opened or read (missing: fs.ErrNotExist; permissions; too many
// open files; an I/O error) gives that error, wrapped, and not ErrCorrupt:
// the file may be whole.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	r := &ioErrReader{r: f}
	hdr := make([]byte, ckptHdrLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		if r.err != nil {
			return nil, fmt.Errorf("read checkpoint %s: %w", path, r.err)
		}
		return nil, fmt.Errorf("%w: truncated: header incomplete (%d bytes)", ErrCorrupt, st.Size())
	}
	if string(hdr[:8]) != ckptMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != ckptFormat {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, v)
	}
	n := int64(binary.LittleEndian.Uint64(hdr[12:]))
	if got := st.Size() - ckptHdrLen; got != n {
		return nil, fmt.Errorf("%w: truncated: payload has %d bytes, header says %d", ErrCorrupt, got, n)
	}
	h, fh := sha256.New(), sha256.New()
	fh.Write(hdr)
	br := bufio.NewReaderSize(io.TeeReader(io.LimitReader(r, n), io.MultiWriter(h, fh)), 1<<20)
	ck, err := decodePayload(br)
	if err == nil {
		_, err = io.Copy(io.Discard, br)
	}
	if r.err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, r.err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if !bytes.Equal(h.Sum(nil), hdr[20:52]) {
		return nil, fmt.Errorf("%w: sha256 mismatch", ErrCorrupt)
	}
	ck.path, ck.fileSHA256 = path, hex.EncodeToString(fh.Sum(nil))
	return ck, nil
}

// ioErrReader records the first error of its reader other than io.EOF: a
// read that failed on the file (I/O, a directory), which says nothing of the
// checkpoint's integrity.
type ioErrReader struct {
	r   io.Reader
	err error
}

func (e *ioErrReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func encodePayload(w io.Writer, ck *Checkpoint) (int64, error) {
	cw := &countingWriter{w: w}
	meta := *ck
	meta.Models = make([]ModelState, len(ck.Models))
	for i, m := range ck.Models {
		meta.Models[i] = ModelState{Config: m.Config, Step: m.Step}
		for _, p := range m.Params {
			meta.Models[i].Params = append(meta.Models[i].Params, ParamState{Name: p.Name})
		}
	}
	var mb bytes.Buffer
	if err := gob.NewEncoder(&mb).Encode(&meta); err != nil {
		return 0, fmt.Errorf("encode checkpoint meta: %w", err)
	}
	if mb.Len() > maxMeta {
		// ReadCheckpoint would refuse it as corrupt: fail the save instead.
		return 0, fmt.Errorf("checkpoint header of %d bytes exceeds %d: the evaluation set, the held-out samples since and the training window it holds are too large (lower --heldout-window or --eval-train-window)",
			mb.Len(), maxMeta)
	}
	if err := binary.Write(cw, binary.LittleEndian, uint32(mb.Len())); err != nil {
		return 0, err
	}
	if _, err := cw.Write(mb.Bytes()); err != nil {
		return 0, err
	}
	buf := make([]byte, 0, 1<<16)
	for i, m := range ck.Models {
		for j, p := range m.Params {
			for k, t := range [][]float32{p.P, p.M, p.V} {
				if ck.tensor != nil {
					t = ck.tensor(i, j, k)
				}
				buf = binary.LittleEndian.AppendUint32(buf[:0], uint32(len(t)))
				for _, v := range t {
					buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
					if len(buf) >= 1<<16 {
						if _, err := cw.Write(buf); err != nil {
							return 0, err
						}
						buf = buf[:0]
					}
				}
				if _, err := cw.Write(buf); err != nil {
					return 0, err
				}
				buf = buf[:0]
			}
		}
	}
	return cw.n, nil
}

// maxMeta bounds the gob header so that a corrupt length cannot allocate wildly.
const maxMeta = 1 << 30

func decodePayload(r io.Reader) (*Checkpoint, error) {
	var ml uint32
	if err := binary.Read(r, binary.LittleEndian, &ml); err != nil {
		return nil, fmt.Errorf("meta length: %w", err)
	}
	if ml > maxMeta {
		return nil, fmt.Errorf("meta length %d too large", ml)
	}
	mb := make([]byte, ml)
	if _, err := io.ReadFull(r, mb); err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	var ck Checkpoint
	if err := gob.NewDecoder(bytes.NewReader(mb)).Decode(&ck); err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	buf := make([]byte, 1<<16)
	for mi := range ck.Models {
		for pi := range ck.Models[mi].Params {
			p := &ck.Models[mi].Params[pi]
			for _, dst := range []*[]float32{&p.P, &p.M, &p.V} {
				var n uint32
				if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
					return nil, fmt.Errorf("tensor %s: %w", p.Name, err)
				}
				if n > 1<<31/4 {
					return nil, fmt.Errorf("tensor %s: length %d too large", p.Name, n)
				}
				t := make([]float32, n)
				for i := 0; i < int(n); {
					k := min(int(n)-i, len(buf)/4)
					if _, err := io.ReadFull(r, buf[:4*k]); err != nil {
						return nil, fmt.Errorf("tensor %s: %w", p.Name, err)
					}
					for j := 0; j < k; j++ {
						t[i+j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:]))
					}
					i += k
				}
				*dst = t
			}
		}
	}
	return &ck, nil
}
