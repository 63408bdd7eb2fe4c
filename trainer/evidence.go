package trainer

import (
	"regexp"
	"strconv"
	"strings"
)

// evidenceFigure returns the score=<x> figure of one line (no '\n') when
// the line matches evidenceLine, without a regular expression (a query of
// a 25-task round is tens of KiB, parsed at every forward pass): the
// pattern's greedy ".+" makes the match the line's last " score=", whose
// rest has no white space (the \S+ up to the line's end), preceded by
// ": pass" or ": fail" with at least one character after "task ".
func evidenceFigure(line string) (string, bool) {
	if !strings.HasPrefix(line, "task ") {
		return "", false
	}
	i := strings.LastIndex(line, " score=")
	if i < 0 {
		return "", false
	}
	fig := line[i+len(" score="):]
	if fig == "" || strings.ContainsAny(fig, " \t\f\r") {
		return "", false
	}
	head := line[:i]
	if !strings.HasSuffix(head, ": pass") && !strings.HasSuffix(head, ": fail") {
		return "", false
	}
	if len(head)-len(": pass") <= len("task ") {
		return "", false
	}
	return fig, true
}

// summaryFailed matches the simulator's evidence summary, "... N of M tasks
// failed ...".
var summaryFailed = regexp.MustCompile(`evidence summary: .*?\b(\d+) of (\d+) tasks failed`)

// EvidenceScore parses the evidence figure of a labeled sample's query: the
// mean of the score=<x> figures of its "task <id>: pass|fail score=<x>" lines
// (the attempt-1 scores, in the update's own round, of the tasks the evolver
// saw as evidence: the cell's "before" level on them); lines "task <id>: no
// outcome in this cell" carry no score and are skipped. With no such line, it
// falls back to 1 − N/M from an "evidence summary: ... N of M tasks failed"
// line (the simulator's wording: the evidence pass rate). ok is false when the
// query carries neither (the evidence regression then predicts the training
// median). A figure outside [0, 1] (not a score: the schema bounds them, so
// it comes from text inside a task input, which the query format does not
// escape) is skipped, so the result is always in [0, 1]; a task input that
// itself contains a well-formed line would still be counted.
func EvidenceScore(query string) (x float64, ok bool) {
	var sum float64
	var n int
	for rest := query; rest != ""; {
		line := rest
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		f, ok := evidenceFigure(line)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			continue // a score is in [0, 1] (schemas): another figure is text in a task input
		}
		sum += v
		n++
	}
	if n > 0 {
		return sum / float64(n), true
	}
	if m := summaryFailed.FindStringSubmatch(query); m != nil {
		failed, err1 := strconv.Atoi(m[1])
		total, err2 := strconv.Atoi(m[2])
		if err1 == nil && err2 == nil && total > 0 && failed <= total {
			return 1 - float64(failed)/float64(total), true
		}
	}
	return 0, false
}
