package chserver

import "errors"

// Sentinel errors returned by Start.
var (
	// ErrNoBinary means no ClickHouse server binary was found. Its message says
	// how to install one.
	ErrNoBinary = errors.New("no clickhouse server binary found: install one with `apt-get install clickhouse-server` " +
		"(Debian/Ubuntu) or put a `clickhouse` binary from https://clickhouse.com on PATH, or pass its path")
	// ErrExited means the server process exited before it answered.
	ErrExited = errors.New("clickhouse-server exited during start")
	// ErrNotReady means the server did not answer before the start deadline.
	ErrNotReady = errors.New("clickhouse-server did not become ready in time")
	// ErrNoDataDir means Config.DataDir was empty.
	ErrNoDataDir = errors.New("chserver: DataDir is required")
)
