package e2e

import "errors"

// ErrNoClient: no clickhouse-client was found for the insert ceiling.
var ErrNoClient = errors.New("no clickhouse-client on PATH (install the clickhouse-client package) or pass --client")

// ErrNotVisible: the rows of a phase did not all reach ClickHouse in time.
var ErrNotVisible = errors.New("rows not visible in ClickHouse in time")

// ErrDLQ: the malformed events of the storm are not all in rejected_events
// with their reason code.
var ErrDLQ = errors.New("malformed events missing from the dead-letter table")
