package aevolve

import "errors"

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
