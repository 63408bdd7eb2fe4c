package schemas

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
)

// DeriveEventID returns a deterministic event id: the hex of the first 16
// bytes of SHA-256 over the type name, the project (for every type that
// belongs to a project: all but rejected and checkpoint_published) and the
// type's identifying fields, each length-prefixed (so field boundaries cannot
// collide). Two projects that use the same ids (a cell id, a campaign id)
// therefore get different event ids: the project is part of every identity.
// The identifying fields are:
//
//	campaign_declared     campaign_id
//	cell_started          cell_id
//	cell_finished         cell_id
//	task_attempt          cell_id, task_id, attempt, cycle
//	skill_event           cell_id, task_id, attempt, turn, tool, skill_name
//	harness_update        cell_id, update_id
//	adherence_judgment    cell_id, task_id, attempt, skill_name, judge_model
//	labeled_sample        sample_id
//	round_metrics         cell_id, cycle
//	rejected              source_topic, partition, offset
//	checkpoint_published  model_version, step
//
// rejected events are identified by their Kafka coordinates, which no two
// projects share, and checkpoints belong to the trainer, not to a project.
// The default project (DefaultProject: the simulator's, the importer's, a
// producer's that names none) hashes no project part: its ids are the ones
// harnessflow derived before projects were hashed, so that re-sending or
// re-importing the same events after an upgrade still gives the same ids
// (and no duplicate rows). It still differs from every other project's:
// the length-prefixed parts make a sequence without the project another
// input than any sequence with one.
//
// The type is always part of the hash, so cell_started and cell_finished of
// one cell differ. Redelivered or re-produced copies of an event get the same
// id, which is what makes sinks idempotent. Safe for concurrent use.
func DeriveEventID(ev Event) string {
	ti, err := lookup(ev)
	if err != nil {
		return ""
	}
	var buf [256]byte
	b := appendIDPart(buf[:0], string(ti.typ))
	if p := ev.Header().Project; projectScoped(ti.typ) && p != DefaultProject {
		b = appendIDPart(b, p)
	}
	for _, name := range ti.idFields {
		f := &ti.fields[ti.byName[name]]
		switch f.kind {
		case kString, kNullString, kEnum:
			b = appendIDPart(b, *f.str(ev))
		case kInt:
			b = appendIDPart(b, strconv.FormatInt(int64(*f.i32(ev)), 10))
		case kLong:
			b = appendIDPart(b, strconv.FormatInt(*f.i64(ev), 10))
		case kDouble:
			b = appendIDPart(b, strconv.FormatUint(math.Float64bits(*f.f64(ev)), 16))
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

func appendIDPart(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// projectScoped reports whether events of type t belong to a project, whose
// name is then part of their derived ids.
func projectScoped(t Type) bool {
	return t != TypeRejected && t != TypeCheckpointPublished
}
