package chsink

import (
	"errors"
	"fmt"
)

// Configuration errors.
var (
	// ErrNoBrokers: Config.Brokers is empty.
	ErrNoBrokers = errors.New("chsink: no Kafka brokers given (--brokers)")
	// ErrNoClickHouse: Config.ClickHouse is empty.
	ErrNoClickHouse = errors.New("chsink: no ClickHouse address given (--clickhouse host:port, native protocol)")
	// ErrBadLimits: a batching limit is negative.
	ErrBadLimits = errors.New("chsink: MaxRows, MaxBytes, MaxAge, MaxBufferedRows, Inserters and RecomputeWorkers must not be negative")
)

// CodeRefused is the reason code of a dead letter (a rejected_events row,
// stage semantic) for a row ClickHouse refused while the rest of its batch
// was inserted; the message holds the server's or the client's reason.
const CodeRefused = "clickhouse_refused"

// encodeError is a value the ClickHouse client could not encode into its
// column: permanent, and the fault of a row (the sink isolates it).
type encodeError struct{ err error }

func (e *encodeError) Error() string { return e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

// InsertError says which table's insert failed, with how many rows and after
// how many attempts. Offsets of its rows were not committed.
type InsertError struct {
	Table    string
	Rows     int
	Attempts int
	Err      error
}

func (e *InsertError) Error() string {
	return fmt.Sprintf("insert %d rows into %s (after %d attempts): %v", e.Rows, e.Table, e.Attempts, e.Err)
}

func (e *InsertError) Unwrap() error { return e.Err }
