// Package stages holds the per-stage benchmarks behind `harnessflow bench
// process|produce|sink|train`: each measures one stage of harnessflow and,
// in the same run and against the same servers, the ceiling it is compared
// with (a plain kafka-go read or write, clickhouse-client from a file, the
// model's own training step), because shared machines are noisy and ratios
// travel better than rates.
//
// Each bench is one function taking its Config (zero fields take the
// Default* constants) and, where it logs, the WithLogger option. Process
// returns its result for the caller to print (ProcessResult.Print); Produce,
// Sink and Train print their rows to the writer they are given as they go.
// An error wrapping ErrFailed means the measured component itself failed
// (the commands exit 1); any other error is one of the bench's own setup
// (they exit 2).
package stages
