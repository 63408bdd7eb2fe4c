package score

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/harnessflow/harnessflow/schemas"
)

// The compact forms of a cell's state (package doc, "Memory"): a cell keeps
// its inputs for as long as a late event may correct its outputs, so what
// it keeps per event is what recomputing the outputs reads, without Go's
// per-string and per-map-entry overhead: strings packed in one byte arena
// per cell, names interned per cell, event ids as 64-bit hashes in a sorted
// set, outputs as fingerprints.

// sref is a string kept in a cell's arena; 0 is the empty string.
type sref uint32

// arena holds a cell's kept strings (task ids, task inputs, the winners'
// event ids) back to back, each behind a uvarint header (length << 2 |
// form). It only grows: a replaced winner's id stays (its event was
// charged). Strings past arenaMax bytes go to spill, one Go string each.
type arena struct {
	b     []byte
	spill []string
	cell  string // the cell id, elided from event ids that start with it
}

// Forms of an arena string.
const (
	formRaw    = iota // the bytes
	formSuffix        // the cell id, then the bytes
	formHex           // lowercase hex of even length, packed two digits a byte (derived event ids)
	formTask          // an event id made of its record's task id and interned parts (cell.putID)
)

const (
	arenaMax  = 1 << 31
	spillFlag = sref(1 << 31)
)

// put keeps s as it is (raw(r) is a view of its bytes).
func (a *arena) put(s string) sref { return a.add(formRaw, len(s), s) }

// putID keeps an event id: without the cell id it starts with, or packed
// when it is lowercase hex (the form of derived ids), else as it is.
func (a *arena) putID(id string) sref {
	switch {
	case id == "":
		return 0
	case a.cell != "" && len(id) > len(a.cell) && strings.HasPrefix(id, a.cell):
		return a.add(formSuffix, len(id)-len(a.cell), id[len(a.cell):])
	case isLowerHex(id):
		return a.addHex(id)
	}
	return a.put(id)
}

func isLowerHex(s string) bool {
	if len(s)%2 != 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// unhex is the value of a lowercase hex digit.
func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// room reports that n more bytes fit in the arena (else they spill).
func (a *arena) room(n int) bool { return len(a.b)+binary.MaxVarintLen64+n < arenaMax }

// add keeps payload in form (n: the header's length). formTask must fit
// (room): a spilled string is kept whole.
func (a *arena) add(form, n int, payload string) sref {
	if n == 0 && form == formRaw {
		return 0
	}
	if a.b == nil {
		a.b = make([]byte, 1, 64) // offset 0 is sref 0
	}
	if !a.room(len(payload)) {
		a.spill = append(a.spill, a.expand(form, payload))
		return spillFlag | sref(len(a.spill)-1)
	}
	r := sref(len(a.b))
	a.b = binary.AppendUvarint(a.b, uint64(n)<<2|uint64(form))
	a.b = append(a.b, payload...)
	return r
}

func (a *arena) addHex(id string) sref {
	if a.b == nil {
		a.b = make([]byte, 1, 64)
	}
	if !a.room(len(id) / 2) {
		a.spill = append(a.spill, id)
		return spillFlag | sref(len(a.spill)-1)
	}
	r := sref(len(a.b))
	a.b = binary.AppendUvarint(a.b, uint64(len(id))<<2|formHex)
	for i := 0; i < len(id); i += 2 {
		a.b = append(a.b, unhex(id[i])<<4|unhex(id[i+1]))
	}
	return r
}

// expand is the string that form and payload stand for.
func (a *arena) expand(form int, payload string) string {
	if form == formSuffix {
		return a.cell + payload
	}
	return payload
}

// entry returns r's form and payload (a view of the arena; nil for 0).
func (a *arena) entry(r sref) (int, []byte) {
	if r == 0 {
		return formRaw, nil
	}
	if r&spillFlag != 0 {
		return formRaw, []byte(a.spill[r&^spillFlag])
	}
	h, k := binary.Uvarint(a.b[r:])
	n := int(h >> 2)
	if form := int(h & 3); form == formHex {
		n /= 2
	}
	start := int(r) + k
	return int(h & 3), a.b[start : start+n]
}

// raw returns the bytes of a string kept by put (a view: do not modify).
func (a *arena) raw(r sref) []byte {
	_, b := a.entry(r)
	return b
}

// str returns the string r stands for (allocated).
func (a *arena) str(r sref) string {
	form, b := a.entry(r)
	switch form {
	case formSuffix:
		return a.cell + string(b)
	case formHex:
		return hex.EncodeToString(b)
	}
	return string(b)
}

// clip drops the arena's spare capacity (the cell finished: it grows by
// late events only).
func (a *arena) clip() {
	if cap(a.b) > len(a.b) {
		a.b = slices.Clone(a.b)
	}
}

// idParts is how many names a cell interns at most for the parts of its
// event ids (formTask): ids whose parts vary more are kept whole.
const idParts = 64

// putID keeps the event id of a record of task (its slot's). An id that holds the
// slot's task id, such as "<cell>:attempt:<task>:1", is kept as the
// indices of the parts around the task id (interned: a cell's ids share
// them), in 2 to 4 bytes; other ids as arena.putID keeps them.
func (c *cell) putID(id, task string) sref {
	rest, hasCell := id, uint64(0)
	if c.arena.cell != "" && strings.HasPrefix(id, c.arena.cell) {
		rest, hasCell = id[len(c.arena.cell):], 1
	}
	if len(task) == 0 || !c.arena.room(2*binary.MaxVarintLen64) {
		return c.arena.putID(id)
	}
	i := strings.Index(rest, task)
	if i < 0 {
		return c.arena.putID(id)
	}
	pre, post := rest[:i], rest[i+len(task):]
	pi, ok1 := c.names.lookup(pre)
	qi, ok2 := c.names.lookup(post)
	if !ok1 || !ok2 {
		if c.idParts+2 > idParts {
			return c.arena.putID(id)
		}
		// Copies: a substring would keep the whole id alive.
		if !ok1 {
			pi = c.names.id(strings.Clone(pre))
			c.idParts++
		}
		if !ok2 {
			qi = c.names.id(strings.Clone(post))
			c.idParts++
		}
	}
	var buf [2 * binary.MaxVarintLen64]byte
	b := binary.AppendUvarint(buf[:0], uint64(pi)<<1|hasCell)
	b = binary.AppendUvarint(b, uint64(qi))
	return c.arena.add(formTask, len(b), string(b))
}

// idStr returns the event id r of a record of slot s (allocated; s is
// not read unless r was kept in the task form).
func (c *cell) idStr(r sref, s int32) string {
	form, b := c.arena.entry(r)
	if form != formTask {
		return c.arena.str(r)
	}
	x, k := binary.Uvarint(b)
	q, _ := binary.Uvarint(b[k:])
	var sb strings.Builder
	if x&1 != 0 {
		sb.WriteString(c.arena.cell)
	}
	sb.WriteString(c.names.str(uint32(x >> 1)))
	sb.Write(c.taskOf(s))
	sb.WriteString(c.names.str(uint32(q)))
	return sb.String()
}

// names interns a cell's few distinct names (harness versions, skill
// names, judge models, the fixed parts of its event ids): a record holds
// an index. Up to namesLinear names are searched in the list, without a
// map.
type names struct {
	idx  map[string]uint32
	list []string
}

const namesLinear = 64

func (n *names) id(s string) uint32 {
	if i, ok := n.lookup(s); ok {
		return i
	}
	i := uint32(len(n.list))
	n.list = append(n.list, s)
	switch {
	case n.idx != nil:
		n.idx[s] = i
	case len(n.list) > namesLinear:
		n.idx = make(map[string]uint32, len(n.list))
		for j, x := range n.list {
			n.idx[x] = uint32(j)
		}
	}
	return i
}

func (n *names) lookup(s string) (uint32, bool) {
	if n.idx != nil {
		i, ok := n.idx[s]
		return i, ok
	}
	for i, x := range n.list {
		if x == s {
			return uint32(i), true
		}
	}
	return 0, false
}

func (n *names) str(i uint32) string { return n.list[i] }

// hashSeed keys the 64-bit hashes of event ids (idSet) and outputs
// (fingerprint): random per process, so that no input can be crafted to
// collide.
var hashSeed = maphash.MakeSeed()

// idSet is a cell's set of seen event ids, as 64-bit hashes (seeded per
// process): sorted, plus the recent ones in a small map merged in as it
// grows. Two distinct ids of one cell share a hash with probability about
// n²/2^65 for n ids (2.7e-12 for a cell of 10^4 events); the later one
// would be skipped as a redelivery. Neither the seed nor the hashes ever
// leave the process, so a restart decides afresh.
type idSet struct {
	sorted []uint64
	recent map[uint64]struct{}
}

// add adds the hash of id and reports whether it was new.
func (s *idSet) add(id string) bool {
	h := maphash.String(hashSeed, id)
	if _, ok := slices.BinarySearch(s.sorted, h); ok {
		return false
	}
	if _, ok := s.recent[h]; ok {
		return false
	}
	if s.recent == nil {
		s.recent = map[uint64]struct{}{}
	}
	s.recent[h] = struct{}{}
	if len(s.recent) >= max(64, len(s.sorted)/4) {
		s.merge()
		clear(s.recent) // reused while the cell grows
	}
	return true
}

// compact merges the recent hashes and drops their map (the cell
// finished: late events are few).
func (s *idSet) compact() {
	s.merge()
	s.recent = nil
}

// merge moves the recent hashes into the sorted slice (exactly sized).
func (s *idSet) merge() {
	if len(s.recent) == 0 {
		return
	}
	add := make([]uint64, 0, len(s.recent))
	for h := range s.recent {
		add = append(add, h)
	}
	slices.Sort(add)
	out := make([]uint64, 0, len(s.sorted)+len(add))
	i, j := 0, 0
	for i < len(s.sorted) && j < len(add) {
		if s.sorted[i] < add[j] {
			out = append(out, s.sorted[i])
			i++
		} else {
			out = append(out, add[j])
			j++
		}
	}
	out = append(append(out, s.sorted[i:]...), add[j:]...)
	s.sorted = out
}

func (s *idSet) len() int { return len(s.sorted) + len(s.recent) }

// fpBufs are scratch buffers for fingerprint.
var fpBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// fingerprint is a 64-bit hash (seeded per process) of an output's
// encoding, every field that goes out: what the last emission of an
// output is remembered as, a correction being emitted only when it
// differs. ok is false when the output does not encode (it then always
// counts as changed). Outputs that differ share a fingerprint with
// probability 2^-64: the correction would be missed.
func fingerprint(ev schemas.Event) (sum uint64, ok bool) {
	bp := fpBufs.Get().(*[]byte)
	b, err := schemas.AppendEncode((*bp)[:0], ev)
	if err == nil {
		sum = maphash.Bytes(hashSeed, b)
	}
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		fpBufs.Put(bp)
	}
	return sum, err == nil
}

// emitted is what an output's last emission is remembered as.
type emitted struct {
	sum  uint64
	done bool // emitted at least once
	ok   bool // sum is valid
}

// same reports whether an output with fingerprint (sum, ok) equals the
// last emission.
func (e emitted) same(sum uint64, ok bool) bool { return e.done && e.ok && ok && e.sum == sum }

// slot is one (task_id, attempt) of a cell: the heads of the lists of its
// attempt winners (one per cycle), load_skill winners and judgment
// winners, each an index + 1 into the cell's records (0: none).
type slot struct {
	task    sref
	attempt int32
	att     int32
	load    int32
	judg    int32
}

// slotHash is the hash of (task, attempt) in the slot index.
func slotHash(task string, attempt int32) uint64 {
	return maphash.String(hashSeed, task) ^ uint64(uint32(attempt))*0x9E3779B97F4A7C15
}

// slotPos is where a hash starts its probe in a slot index of n entries.
func slotPos(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

// findSlot returns the index of (task, attempt)'s slot, -1 if none.
func (c *cell) findSlot(task string, attempt int32) int32 {
	n := len(c.slotIdx)
	if n == 0 {
		return -1
	}
	for i := slotPos(slotHash(task, attempt), n); ; {
		e := c.slotIdx[i]
		if e == 0 {
			return -1
		}
		s := &c.slots[e-1]
		if s.attempt == attempt && string(c.arena.raw(s.task)) == task {
			return e - 1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// findSlotBytes is findSlot for a task id given as bytes.
func (c *cell) findSlotBytes(task []byte, attempt int32) int32 {
	n := len(c.slotIdx)
	if n == 0 {
		return -1
	}
	h := maphash.Bytes(hashSeed, task) ^ uint64(uint32(attempt))*0x9E3779B97F4A7C15
	for i := slotPos(h, n); ; {
		e := c.slotIdx[i]
		if e == 0 {
			return -1
		}
		s := &c.slots[e-1]
		if s.attempt == attempt && bytes.Equal(c.arena.raw(s.task), task) {
			return e - 1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// slotOf returns the index of (task, attempt)'s slot, adding it if need be.
func (c *cell) slotOf(task string, attempt int32) int32 {
	if i := c.findSlot(task, attempt); i >= 0 {
		return i
	}
	if (len(c.slots)+1)*4 > len(c.slotIdx)*3 {
		c.rehashSlots(max(16, 2*len(c.slotIdx)))
	}
	c.slots = append(c.slots, slot{task: c.arena.put(task), attempt: attempt})
	c.insertSlot(int32(len(c.slots)-1), slotHash(task, attempt))
	return int32(len(c.slots) - 1)
}

func (c *cell) insertSlot(idx int32, h uint64) {
	n := len(c.slotIdx)
	i := slotPos(h, n)
	for c.slotIdx[i] != 0 {
		if i++; i == n {
			i = 0
		}
	}
	c.slotIdx[i] = idx + 1
}

// rehashSlots rebuilds the slot index with n entries (more than the
// slots: a probe ends at an empty entry).
func (c *cell) rehashSlots(n int) {
	if len(c.slots) == 0 && n == 0 {
		c.slotIdx = nil
		return
	}
	c.slotIdx = make([]int32, max(n, len(c.slots)+1))
	for i := range c.slots {
		s := &c.slots[i]
		c.insertSlot(int32(i), maphash.Bytes(hashSeed, c.arena.raw(s.task))^uint64(uint32(s.attempt))*0x9E3779B97F4A7C15)
	}
}

// taskOf returns slot s's task id (a view of the arena).
func (c *cell) taskOf(s int32) []byte { return c.arena.raw(c.slots[s].task) }

// compact drops the spare capacity a finished cell no longer grows into
// (late events grow it again, a little).
func (c *cell) compact() {
	c.seen.compact()
	c.names.list = slices.Clone(c.names.list)
	c.arena.clip()
	c.slots = slices.Clone(c.slots)
	c.recs = slices.Clone(c.recs)
	c.loads = slices.Clone(c.loads)
	c.judgs = slices.Clone(c.judgs)
	c.rounds.clip()
	for i := range c.rounds.len() {
		r := c.rounds.val(i)
		r.keys = slices.Clone(r.keys)
	}
	c.chain.clip()
	c.byUpdate.clip()
	c.pairs.clip()
	c.updates = slices.Clone(c.updates)
	c.rehashSlots(len(c.slots) * 4 / 3)
}

// sortInt32s sorts xs by less (sort.Slice over indices).
func sortInt32s(xs []int32, less func(a, b int32) bool) {
	sort.Slice(xs, func(i, j int) bool { return less(xs[i], xs[j]) })
}

// smallMap is a map that searches its entries while it holds at most
// smallMax of them, and adds an index map beyond: a cell's few rounds,
// versions, updates and judgment pairs cost a Go map's fixed part
// otherwise. Entries are never removed.
type smallMap[K comparable, V any] struct {
	ents []smallEnt[K, V]
	idx  map[K]int32
}

type smallEnt[K comparable, V any] struct {
	k K
	v V
}

const smallMax = 16

// index returns k's position in ents.
func (m *smallMap[K, V]) index(k K) (int, bool) {
	if m.idx != nil {
		i, ok := m.idx[k]
		return int(i), ok
	}
	for i := range m.ents {
		if m.ents[i].k == k {
			return i, true
		}
	}
	return 0, false
}

func (m *smallMap[K, V]) get(k K) (V, bool) {
	if i, ok := m.index(k); ok {
		return m.ents[i].v, true
	}
	var zero V
	return zero, false
}

// put sets k's value and returns its position.
func (m *smallMap[K, V]) put(k K, v V) int {
	if i, ok := m.index(k); ok {
		m.ents[i].v = v
		return i
	}
	m.ents = append(m.ents, smallEnt[K, V]{k, v})
	i := len(m.ents) - 1
	switch {
	case m.idx != nil:
		m.idx[k] = int32(i)
	case len(m.ents) > smallMax:
		m.idx = make(map[K]int32, len(m.ents))
		for j := range m.ents {
			m.idx[m.ents[j].k] = int32(j)
		}
	}
	return i
}

func (m *smallMap[K, V]) len() int { return len(m.ents) }

// key and val return the i-th entry's key and value.
func (m *smallMap[K, V]) key(i int) K { return m.ents[i].k }
func (m *smallMap[K, V]) val(i int) V { return m.ents[i].v }

// clip drops the spare capacity.
func (m *smallMap[K, V]) clip() { m.ents = slices.Clone(m.ents) }
