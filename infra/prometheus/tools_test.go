// Package prometheus_test checks infra/prometheus: the scrape configs and
// rules with promtool, the rules' unit tests, every metric name they use
// against the metrics the components declare, and a real Prometheus
// scraping a running `harnessflow up`.
package prometheus_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

// tool returns the path of an installed Prometheus binary (promtool,
// prometheus). Missing, it fails the test under CI=true and skips it
// elsewhere, naming the install command.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " is not installed; install Debian's prometheus package: sudo apt-get install -y prometheus (or make test-deps as root)"
	testenv.Missing(t, msg)
	return ""
}

// promtool runs promtool with args in this directory and fails the test
// with its output when it fails.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool(t, "promtool"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPromtoolChecksConfigsAndRules: both scrape configs (and the rules
// they load) pass promtool check config, the rules promtool check rules.
func TestPromtoolChecksConfigsAndRules(t *testing.T) {
	for _, f := range []string{"prometheus.yml", "up.yml"} {
		promtool(t, "check", "config", f)
	}
	promtool(t, "check", "rules", "rules.yml")
}

// TestPromtoolRuleUnitTests runs rules_test.yml: each alert fires when its
// condition has held for its duration, and not before.
func TestPromtoolRuleUnitTests(t *testing.T) {
	promtool(t, "test", "rules", "rules_test.yml")
}
