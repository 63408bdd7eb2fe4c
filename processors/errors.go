package processors

import (
	"errors"
	"fmt"

	"github.com/harnessflow/harnessflow/schemas"
)

// Sentinel errors.
var (
	// ErrConfig: Config.Validate found a problem; the joined error lists each.
	ErrConfig = errors.New("invalid processor config")
	// ErrAlreadyRun: Run was called a second time on the same Processor.
	ErrAlreadyRun = errors.New("processor: Run called more than once")
	// ErrWrite: outputs could not be written to Kafka within the retry budget
	// (Config.RetryMaxElapsed); Run stops with this error rather than commit
	// offsets whose outputs were not acknowledged.
	ErrWrite = errors.New("write outputs")
	// ErrTopicLayout: the raw cell topics do not have equal partition counts,
	// which co-partitioned processing needs (see doc.go).
	ErrTopicLayout = errors.New("raw cell topics must have equal partition counts")
)

// Reason codes of dead letters that this package adds to the schemas.Code*
// field-error codes (which are used as they are for the syntax stage).
const (
	// Decode stage: schemas.CodeMalformed, CodeUnknownFingerprint, CodeUnknownType.

	// CodeWrongTopic (syntax): the event's type does not belong on the topic
	// it was read from (a task_attempt on hf.updates).
	CodeWrongTopic = "wrong_topic"
	// CodeBadFrontMatter (syntax): a skill artifact's content lacks YAML front
	// matter with non-empty string name and description.
	CodeBadFrontMatter = "bad_front_matter"
	// CodeBadToolRegistry (syntax): a tool artifact's content is not a tool
	// registry (YAML mapping with a non-empty "tools" list of entries that each
	// have a non-empty string "name").
	CodeBadToolRegistry = "bad_tool_registry"
	// CodeContentHashMismatch (syntax): an artifact's content_sha256 is not the
	// hex sha256 of its content.
	CodeContentHashMismatch = "content_hash_mismatch"

	// CodeUnknownCell (semantic): no cell_started for the cell arrived within
	// Config.PendingTimeout (or the pending buffer overflowed).
	CodeUnknownCell = "unknown_cell"
	// CodeVersionChain (semantic): an update's from_version is not the cell's
	// current harness version.
	CodeVersionChain = "version_chain"
	// CodeDuplicateContent (semantic): an artifact's content hash is already in
	// the cell.
	CodeDuplicateContent = "duplicate_content"
	// CodeNoEvidence (semantic): an update names no evidence task ids.
	CodeNoEvidence = "no_evidence"
	// CodeUnknownVersion (semantic): an attempt runs a harness version that is
	// neither the cell's h0 nor the to_version of an accepted update, by the
	// time the cell finished (or Config.PendingTimeout passed).
	CodeUnknownVersion = "unknown_version"
	// CodeDuplicateCell (semantic): a second cell_started (or cell_finished)
	// for a cell, with another event id.
	CodeDuplicateCell = "duplicate_cell"
	// CodeScoreRejected (semantic): the scorer refused an admitted event (a
	// bug upstream of it; the message says why).
	CodeScoreRejected = "score_rejected"

	// CodePayloadTooLarge (limit): the message is larger than Limits.Event.
	CodePayloadTooLarge = "payload_too_large"
	// CodeOpenCellsCap (limit): a cell_started would give its project more
	// than Config.MaxOpenCells unfinished cells on the partition (and the
	// events that waited for that cell_started).
	CodeOpenCellsCap = "open_cells_cap"
	// CodeStateBytesCap (limit): admitting the event would take its
	// project's state on the partition past Config.MaxStateBytes.
	CodeStateBytesCap = "state_bytes_cap"
	// CodeCellIdle (limit): an unfinished cell had no admitted event for
	// Config.CellIdle and its state was dropped (the dead letter has the
	// coordinates of its cell_started and no payload).
	CodeCellIdle = "cell_idle"
	// CodeLateBeyondWindow (limit): an event of a cell that finished longer
	// ago than the retention window for late events (--grace: stage A keeps
	// a finished cell that long, stage B twice as long); within it a late
	// event corrects the derived events, past it the cell's state is gone
	// and the event is refused. Stage B also refuses so an event of a cell
	// whose state it no longer holds before that: forgotten early past its
	// project's cap on finished state (--max-state-bytes), or its pairer
	// evicted or aged out (then also at once when --pending-max such
	// events wait). The views leave these events out too.
	CodeLateBeyondWindow = "late_beyond_window"
)

// rejection is the reason an input was dead-lettered. Its message does not
// name the entity: the dead letter's message is prefixed with the entity of
// ev, else of the message's event, else of its payload (schemas.NewRejected).
type rejection struct {
	stage, code, msg string
	// ev is the event rejected when it is not the message's own (an event
	// held by stage B and added when its cell_started arrived); nil: the
	// message's.
	ev schemas.Event
}

// about sets the event r is about and returns r.
func (r *rejection) about(ev schemas.Event) *rejection {
	r.ev = ev
	return r
}

func (r *rejection) Error() string { return fmt.Sprintf("%s/%s: %s", r.stage, r.code, r.msg) }

func reject(stage, code, format string, args ...any) *rejection {
	return &rejection{stage: stage, code: code, msg: fmt.Sprintf(format, args...)}
}
