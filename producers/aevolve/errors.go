package aevolve

import (
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrNoCells is returned when the directory holds no A-Evolve cell
	// directory (<solver>_x_<evolver>_<bm>_s<seed>).
	ErrNoCells = errors.New("no A-Evolve cell directory found")
	// ErrNoGit is returned when a cell has a git workspace but the git
	// command-line tool is not installed.
	ErrNoGit = errors.New("git not found on PATH (install git to import workspace updates)")
	// ErrConfig wraps configuration problems.
	ErrConfig = errors.New("invalid importer config")
)

// ErrRefused is wrapped by every RefusedError: a file of a run directory
// the importer will not read because it is unsafe.
var ErrRefused = errors.New("file refused")

// RefusedError is a file of a run directory that the importer does not read
// because reading it is unsafe: a link out of the cell directory, a device,
// a FIFO or a socket, a symbolic link, a file with more than one hard link,
// a file over Config.MaxFileBytes, a git workspace that cannot be copied,
// a cell directory that is a symbolic link. The importer reports it,
// counts it in Summary.Refused and goes on with the rest of the run
// directory.
type RefusedError struct {
	// Path is the file, relative to its cell directory.
	Path string
	// Reason says why, as a phrase after the path ("is a FIFO").
	Reason string
}

// Error is "path: refused: reason", the path escaped when it holds
// characters that are not printable (terminal escape codes).
func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: refused: %s", shown(e.Path), shown(e.Reason))
}

// Unwrap returns ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }
