// Package chaos is the proof that nothing is lost and nothing is counted
// twice under faults (`harnessflow chaos`, `make chaos`): it runs the
// pipeline as real child processes (bench/fleet), writes a generated
// campaign while it kills and restarts the processors, the sink, the trainer,
// the broker and ClickHouse and faults Kafka requests, then compares every
// table, dead letter and trained sample with an uninterrupted reference run.
package chaos
