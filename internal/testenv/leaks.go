package testenv

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// NoLeaks checks, when the test ends, that every goroutine started during
// the test whose stack runs code of one of pkgs (import paths, e.g.
// "github.com/harnessflow/harnessflow/processors") has ended: a component
// stopped by its test owns and waits for what it started. It waits up to
// five seconds for them to end, then fails the test with their stacks.
// Goroutines alive when NoLeaks was called are ignored. Call it first in a
// test (its cleanup then runs after the others, which stop the component).
func NoLeaks(t testing.TB, pkgs ...string) {
	t.Helper()
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	t.Cleanup(func() {
		var left []goroutine
		deadline := time.Now().Add(5 * time.Second)
		for {
			left = startedSince(before, pkgs)
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // polling interval while they end
		}
		for _, g := range left {
			t.Errorf("goroutine left running after the test (nobody waited for it):\n%s", g.stack)
		}
	})
}

type goroutine struct{ id, stack string }

// startedSince returns the goroutines not in before that run code of pkgs.
func startedSince(before map[string]bool, pkgs []string) []goroutine {
	var out []goroutine
	for _, g := range goroutines() {
		if !before[g.id] && g.runs(pkgs) {
			out = append(out, g)
		}
	}
	return out
}

// runs reports whether the goroutine's stack has a frame of one of pkgs
// (a function of the package itself, not of a subpackage).
func (g goroutine) runs(pkgs []string) bool {
	for _, line := range strings.Split(g.stack, "\n") {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") {
			continue
		}
		for _, p := range pkgs {
			if strings.HasPrefix(line, p+".") {
				return true
			}
		}
	}
	return false
}

func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		s := string(block)
		// "goroutine 17 [chan receive]:"
		head, _, _ := strings.Cut(s, "\n")
		f := strings.Fields(head)
		if len(f) < 2 || f[0] != "goroutine" {
			continue
		}
		out = append(out, goroutine{id: f[1], stack: s})
	}
	return out
}
