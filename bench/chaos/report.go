package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a campaign; it is what chaos.json holds.
type Report struct {
	// Pass is true when every assertion held.
	Pass bool `json:"pass"`
	// Failures name each failed assertion.
	Failures []string `json:"failures,omitempty"`
	// Seed replays the campaign, malformed events and fault plan.
	Seed int64 `json:"seed"`
	// EventsProduced is the number of good events produced (each
	// acknowledged once or more).
	EventsProduced int `json:"events_produced"`
	// MalformedSent is the number of malformed messages produced.
	MalformedSent int `json:"malformed_sent"`
	// MalformedByReason is the reason code each malformed message must be
	// dead-lettered with, counted.
	MalformedByReason map[string]int `json:"malformed_by_reason"`
	// RawLogMessages is the number of messages in the raw topics at the end:
	// above EventsProduced+MalformedSent by the producer retries' copies.
	RawLogMessages int64 `json:"raw_log_messages"`
	// RawOrder compares the raw log's order of each cell's events with the
	// production order (diagnostic).
	RawOrder Ordering `json:"raw_order"`
	// Rows is the number of distinct ids per table visible with FINAL (for
	// rejected_events: distinct malformed payloads in hf.dlq's dead letters;
	// for trainer_steps: distinct trained sample ids).
	Rows map[string]int `json:"rows"`
	// DLQ is the number of malformed events found in the DLQ (hf.dlq's
	// rows of rejected_events, by payload); DLQReasons counts its rows by
	// reason code.
	DLQ        int            `json:"dlq"`
	DLQReasons map[string]int `json:"dlq_reasons"`
	// DLQWrongReason counts malformed events with another reason code.
	DLQWrongReason int `json:"dlq_wrong_reason"`
	// DLQLogCopies counts malformed payloads the producer's retries wrote
	// twice to the raw log (each copy is dead-lettered).
	DLQLogCopies int `json:"dlq_log_copies"`
	// SinkDecodeRows are the sink's own decode rejections of raw messages.
	SinkDecodeRows int `json:"sink_decode_rows"`
	// Lost and Duplicated are the totals over Tables.
	Lost       int `json:"lost"`
	Duplicated int `json:"duplicated"`
	// Samples is the number of labeled samples of the uninterrupted
	// reference run; SampleMismatches those whose label, effect or p-value
	// differ in ClickHouse.
	Samples          int  `json:"samples"`
	SamplesEqual     bool `json:"samples_equal_reference"`
	SampleMismatches int  `json:"sample_mismatches"`
	// TrainedTwice is the number of sample ids in more than one step of
	// trainer_steps FINAL; Untrained the samples in none.
	TrainedTwice int `json:"trained_twice"`
	Untrained    int `json:"untrained"`
	// Tables holds each table's figures.
	Tables []TableCheck `json:"tables"`
	// Faults counts the faults injected, per kind.
	Faults map[string]int `json:"faults"`
	// KafkaRequestsFaulted is the number of produce and fetch requests
	// answered with an error or held.
	KafkaRequestsFaulted int64 `json:"kafka_requests_faulted"`
	// UnexpectedExits counts children that died without being killed (each
	// was restarted); any is a failure of the run.
	UnexpectedExits map[string]int `json:"unexpected_exits"`
	// Restarts counts each child's lives.
	Starts map[string]int `json:"starts"`
	// Producer holds the Go SDK's counters.
	Producer ProducerStats `json:"producer"`
	// Lag is each consumer group's uncommitted messages at the end.
	Lag map[string]int64 `json:"lag"`
	// PeakRSSMB is each child's peak resident memory over its lives.
	PeakRSSMB map[string]float64 `json:"peak_rss_mb"`
	// SettleS is how long the catch-up took after the last event.
	SettleS float64 `json:"settle_s"`
	// ReferenceS is how long the reference processor took.
	ReferenceS float64 `json:"reference_s"`
	// RunDir holds the children's logs (RunDir/logs) when kept.
	RunDir string `json:"run_dir,omitempty"`
	// Machine, Date, Command and DurationS describe the run.
	Machine   string  `json:"machine"`
	Date      string  `json:"date"`
	Command   string  `json:"command"`
	DurationS float64 `json:"duration_s"`
	// Plan is the fault plan, one line per fault.
	Plan []string `json:"plan"`
}

// ProducerStats are the Go SDK's counters for the good events.
type ProducerStats struct {
	Emitted   uint64 `json:"emitted"`
	Delivered uint64 `json:"delivered"`
	Retries   uint64 `json:"retries"`
	// Resent is the number of events the SDK gave up on and the driver
	// produced again.
	Resent int `json:"resent"`
}

// Err returns nil when the campaign passed, else ErrFailed with the failures.
func (r *Report) Err() error {
	if r.Pass {
		return nil
	}
	msg := strings.Join(r.Failures, "; ")
	if r.RunDir != "" {
		msg += fmt.Sprintf(" (seed %d; children's logs in %s)", r.Seed, filepath.Join(r.RunDir, "logs"))
	}
	return fmt.Errorf("%w: %s", ErrFailed, msg)
}

// WriteJSON writes the report to path (indented), creating its directory.
func (r *Report) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable prints the report as tables.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\texpected\trows (FINAL)\tlost\tduplicated\tunexpected\t")
	for _, t := range r.Tables {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", t.Table, t.Expected, t.Rows, t.Lost, t.Duplicated, t.Unexpected)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("seed", r.Seed)
	row("events produced", fmt.Sprintf("%d good + %d malformed (%d messages in the raw log; SDK retries %d, resent %d)", r.EventsProduced, r.MalformedSent, r.RawLogMessages, r.Producer.Retries, r.Producer.Resent))
	row("DLQ", fmt.Sprintf("%d of %d malformed, reasons %v (expected %v), wrong reason %d, log copies %d, sink decode rows %d", r.DLQ, r.MalformedSent, r.DLQReasons, r.MalformedByReason, r.DLQWrongReason, r.DLQLogCopies, r.SinkDecodeRows))
	row("raw log order", fmt.Sprintf("%d log inversions, %d timestamp inversions, %d timestamp ties ranked out of order (of a cell's events)", r.RawOrder.LogInversions, r.RawOrder.TimeInversions, r.RawOrder.TimeTies))
	row("samples = reference", fmt.Sprintf("%v (%d samples, %d differ)", r.SamplesEqual, r.Samples, r.SampleMismatches))
	row("trainer", fmt.Sprintf("trained twice %d, untrained %d", r.TrainedTwice, r.Untrained))
	row("lost / duplicated", fmt.Sprintf("%d / %d", r.Lost, r.Duplicated))
	row("faults", fmt.Sprintf("%v (%d Kafka requests faulted)", r.Faults, r.KafkaRequestsFaulted))
	row("unexpected exits", fmt.Sprintf("%v", r.UnexpectedExits))
	row("lag at end", fmt.Sprintf("%v", r.Lag))
	row("peak RSS MiB", fmt.Sprintf("%v", r.PeakRSSMB))
	row("durations", fmt.Sprintf("run %.0fs, settle %.0fs, reference %.1fs", r.DurationS, r.SettleS, r.ReferenceS))
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL: " + strings.Join(r.Failures, "; ")
	}
	row("result", verdict)
	tw.Flush()
}

// Machine describes the machine: OS/arch, CPU model and count, memory.
func Machine() string {
	cpu := ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
				break
			}
		}
		f.Close()
	}
	s := fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	if cpu != "" {
		s += " (" + cpu + ")"
	}
	return s + mem
}
