package chddl

import (
	"errors"
	"fmt"
)

// ErrNoDatabase is returned when Migrate is given an empty database name.
var ErrNoDatabase = errors.New("chddl: no database name given")

// StatementError says which statement of which migration failed.
type StatementError struct {
	// File is the migration's file name, e.g. "0002_views.sql".
	File string
	// Index is the statement's 1-based position in the file.
	Index int
	// SQL is the statement as sent (database substituted).
	SQL string
	Err error
}

func (e *StatementError) Error() string {
	head := e.SQL
	if len(head) > 120 {
		head = head[:120] + "..."
	}
	return fmt.Sprintf("migration %s statement %d (%s): %v", e.File, e.Index, head, e.Err)
}

func (e *StatementError) Unwrap() error { return e.Err }

// RecomputeError says that recomputing the cell_scores of some cells failed;
// their summaries keep their previous figures.
type RecomputeError struct {
	// Cells is how many cells the failed statement covered.
	Cells int
	Err   error
}

func (e *RecomputeError) Error() string {
	return fmt.Sprintf("recompute cell_scores of %d cells: %v", e.Cells, e.Err)
}

func (e *RecomputeError) Unwrap() error { return e.Err }

// ErrBadVersion is returned for a server version that cannot be parsed.
var ErrBadVersion = errors.New("chddl: not a ClickHouse version")
