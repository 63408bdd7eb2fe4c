//go:build composetest

package composetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
)

// project is the compose project name of both shapes (one at a time).
const project = "hfcomposetest"

// The compose files of each shape, stand-ins merged last.
var (
	singleFiles  = []string{"docker-compose.yml", "infra/compose/stand-ins.yml"}
	clusterFiles = []string{"docker-compose.yml", "docker-compose.cluster.yml", "infra/compose/stand-ins.yml", "infra/compose/stand-ins.cluster.yml"}
)

// serviceUID is the user the harnessflow services run as when the test runs
// as root: compose-secrets.sh gives it the secrets (a root user would hide
// every permission mistake of the compose files and the Dockerfile).
const serviceUID = "10001"

// campaign is the compose file's demo campaign (its `simulate` tool's flags).
func campaign() sim.Config {
	c := sim.DefaultConfig()
	c.Campaign, c.Scale, c.Seed = "demo", 20, 1
	return c
}

// counts are a campaign's deduplicated rows in ClickHouse and, Behind, its
// cells whose summary misses some of their attempts (chddl.SummariesBehind;
// 0 once every figure is final).
type counts struct{ Attempts, Samples, Rounds, Cells, Behind int }

// TestCompose runs the single-node shape, then the cluster shape, and checks
// that the cluster's report equals the single node's.
func TestCompose(t *testing.T) {
	if os.Getenv("DOCKER_HOST") == "" {
		t.Fatal("DOCKER_HOST is not set: run `make compose-test` (infra/scripts/compose-test.sh starts the Docker engine)")
	}
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (apt-get install docker.io docker-compose)", tool)
		}
	}
	root := repoRoot(t)
	events, want := demoEvents(t)
	t.Logf("campaign demo: %d events, want %+v", len(events), want)

	// What compose-secrets.sh writes and was not there before goes at the end.
	for _, f := range []string{"secrets", ".env"} {
		if _, err := os.Stat(filepath.Join(root, f)); os.IsNotExist(err) {
			t.Cleanup(func() { os.RemoveAll(filepath.Join(root, f)) })
		}
	}
	secrets(t, root)

	var single string
	t.Run("single", func(t *testing.T) {
		s := newShape(t, root, singleFiles...)
		s.upAndSend(events, want)
		single = s.report()
		if !strings.Contains(single, "demo") {
			t.Fatalf("report does not name campaign demo:\n%s", single)
		}
		t.Logf("report: %d lines, %d bytes", strings.Count(single, "\n"), len(single))

		// Prometheus scrapes every service of infra/prometheus/prometheus.yml.
		s.targetsUp([]string{"ingest:8080", "processor1:9465", "processor2:9465", "sink:9464", "trainer:8090"})

		// The trainer's checkpoint is on its named volume.
		files := s.waitCheckpoint()
		t.Logf("checkpoints on %s_trainer-checkpoints: %v", project, files)

		// A restart of the sink and the trainer: the data stays, the trainer
		// restores its checkpoint, and the same campaign sent again changes
		// nothing.
		since := time.Now().Add(-time.Second)
		s.compose(2*time.Minute, "restart", "sink", "trainer")
		s.waitHealthy(3 * time.Minute)
		s.waitLog("trainer", since, "restored checkpoint", 2*time.Minute)
		if got := s.counts(); got != want {
			t.Fatalf("after the restart ClickHouse holds %+v, want %+v", got, want)
		}
		resent := s.query("clickhouse", "SELECT toString(now())")
		s.send(events)
		s.waitResent(resent, want, 5*time.Minute)
		if got := s.counts(); got != want {
			t.Fatalf("the campaign sent again: %+v, want %+v", got, want)
		}
		if again := s.report(); again != single {
			t.Fatalf("the report changed after the restart and the resend:\n%s\nwant\n%s", again, single)
		}
		s.down()
	})
	if t.Failed() || single == "" {
		t.Fatal("the single-node shape failed: the cluster shape is not run")
	}

	t.Run("cluster", func(t *testing.T) {
		s := newShape(t, root, clusterFiles...)
		s.upAndSend(events, want)

		// migrate --cluster hf created the same tables on every node, and
		// each holds data: both shards were written, both replicas of each
		// have it.
		nodes := []string{"clickhouse", "clickhouse-s1r2", "clickhouse-s2r1", "clickhouse-s2r2"}
		var tables0 string
		for _, n := range nodes {
			tables := s.query(n, "SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = 'harnessflow' ORDER BY name)")
			if tables0 == "" {
				tables0 = tables
			} else if tables != tables0 {
				t.Errorf("%s has tables %s, clickhouse %s", n, tables, tables0)
			}
		}
		deadline := time.Now().Add(2 * time.Minute)
		for _, n := range nodes {
			for {
				rows, _ := strconv.Atoi(s.query(n, "SELECT sum(rows) FROM system.parts WHERE database = 'harnessflow' AND active"))
				if rows > 0 {
					t.Logf("%s: %d rows in its parts", n, rows)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s holds no rows of harnessflow: a shard or a replica got nothing", n)
				}
				time.Sleep(2 * time.Second)
			}
		}
		// Both sinks consumed (one group: each has partitions).
		for _, port := range []string{"9464", "9467"} {
			s.metricPositive("http://127.0.0.1:"+port+"/metrics", "hf_sink_rows_inserted_total")
		}
		// The report through a replica of each shard is the single node's.
		for _, n := range []string{"clickhouse", "clickhouse-s2r2"} {
			s.waitSummaries(n, 2*time.Minute)
			got := s.compose(3*time.Minute, "run", "--rm", "-T", "report",
				"report", "--clickhouse", n+":9000", "--clickhouse-password-file", "/run/secrets/clickhouse_password", "--database", "harnessflow")
			if got != single {
				t.Errorf("report through %s:\n%s\nthe single node's:\n%s", n, got, single)
			}
		}
		s.down()
	})
}

// repoRoot is the repository's root (this package is infra/composetest).
func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// secrets runs infra/scripts/compose-secrets.sh as the compose files say;
// as root, for a non-root service user.
func secrets(t *testing.T, root string) {
	cmd := exec.Command("bash", filepath.Join(root, "infra", "scripts", "compose-secrets.sh"))
	cmd.Dir = root
	cmd.Env = os.Environ()
	if os.Getuid() == 0 {
		cmd.Env = append(cmd.Env, "HF_UID="+serviceUID, "HF_GID="+serviceUID)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
	}
}

// demoEvents is the demo campaign and the rows it leaves in ClickHouse.
func demoEvents(t *testing.T) ([]schemas.Event, counts) {
	var evs []schemas.Event
	if err := sim.Generate(campaign(), func(ev schemas.Event) error { evs = append(evs, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	var c counts
	rounds := map[string]bool{}
	for _, ev := range evs {
		switch e := ev.(type) {
		case *schemas.TaskAttempt:
			c.Attempts++
			rounds[fmt.Sprintf("%s\x00%d", e.CellID, e.Cycle)] = true
		case *schemas.HarnessUpdate:
			if len(e.Artifacts) > 0 {
				c.Samples++
			}
		case *schemas.CellStarted:
			c.Cells++
		}
	}
	c.Rounds = len(rounds)
	return evs, c
}

// shape is one compose shape brought up by the test.
type shape struct {
	t     *testing.T
	root  string
	files []string
	env   []string
}

func newShape(t *testing.T, root string, files ...string) *shape {
	s := &shape{t: t, root: root, files: files, env: os.Environ()}
	if os.Getuid() == 0 {
		s.env = append(s.env, "HF_UID="+serviceUID, "HF_GID="+serviceUID)
	}
	// A run cut short (a timeout, a killed dockerd) may have left the
	// project's containers and volumes, of either shape: start from none.
	all := &shape{t: t, root: root, files: clusterFiles, env: s.env}
	if _, err := all.run(5*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, nothing of the project is left behind.
	t.Cleanup(func() {
		if t.Failed() {
			s.diagnose()
		}
		_, _ = s.run(5*time.Minute, "down", "-v", "--remove-orphans", "-t", "20")
	})
	return s
}

// run runs docker-compose with the shape's files; it returns stdout, and
// stderr with the error.
func (s *shape) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := []string{"--ansi", "never", "-p", project}
	for _, f := range s.files {
		full = append(full, "-f", f)
	}
	cmd := exec.CommandContext(ctx, "docker-compose", append(full, args...)...)
	cmd.Dir = s.root
	cmd.Env = s.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("docker-compose %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (s *shape) compose(timeout time.Duration, args ...string) string {
	s.t.Helper()
	out, err := s.run(timeout, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

func docker(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// upAndSend brings the shape up, waits until it is healthy, sends the
// campaign through the composed ingest and waits until ClickHouse holds it.
func (s *shape) upAndSend(events []schemas.Event, want counts) {
	s.t.Helper()
	start := time.Now()
	s.compose(30*time.Minute, "up", "-d", "--build")
	s.t.Logf("up -d --build: %s", time.Since(start).Round(time.Second))
	s.waitHealthy(5 * time.Minute)
	s.t.Logf("healthy: %s", time.Since(start).Round(time.Second))
	s.send(events)
	s.waitCounts(want, 10*time.Minute)
	s.t.Logf("campaign in ClickHouse: %s", time.Since(start).Round(time.Second))
}

// waitHealthy waits until every container of the project runs and is
// healthy where it has a health check, or has exited 0 and is not restarted
// (migrate).
func (s *shape) waitHealthy(timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ids := strings.Fields(s.compose(time.Minute, "ps", "-q"))
		var bad []string
		for _, id := range ids {
			out, err := docker(time.Minute, "inspect", "-f",
				"{{.Name}} {{.State.Status}} {{.State.ExitCode}} {{.HostConfig.RestartPolicy.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}", id)
			if err != nil {
				s.t.Fatal(err)
			}
			f := strings.Fields(out)
			name, status, code, restart, health := f[0], f[1], f[2], f[3], f[4]
			switch {
			case status == "running" && (health == "healthy" || health == "none"):
			case status == "exited" && code == "0" && restart == "no":
			case status == "exited" && restart == "no":
				s.t.Fatalf("%s exited with %s", name, code)
			default:
				bad = append(bad, name+" "+status+"/"+health)
			}
		}
		if len(ids) > 0 && len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("not healthy after %s: %v", timeout, bad)
		}
		time.Sleep(2 * time.Second)
	}
}

// send posts the events to the composed ingest (published on 127.0.0.1:8080)
// with the token of secrets/ingest-tokens, as NDJSON in batches.
func (s *shape) send(events []schemas.Event) {
	s.t.Helper()
	tokens, err := os.ReadFile(filepath.Join(s.root, "secrets", "ingest-tokens"))
	if err != nil {
		s.t.Fatal(err)
	}
	token := strings.Fields(string(tokens))[0]
	const batch = 500
	client := &http.Client{Timeout: time.Minute}
	for i := 0; i < len(events); i += batch {
		var body bytes.Buffer
		for _, ev := range events[i:min(i+batch, len(events))] {
			b, err := schemas.MarshalJSON(ev)
			if err != nil {
				s.t.Fatal(err)
			}
			body.Write(b)
			body.WriteByte('\n')
		}
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/v1/events", &body)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := client.Do(req)
		if err != nil {
			s.t.Fatalf("ingest: %v", err)
		}
		var answer bytes.Buffer
		_, _ = answer.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			s.t.Fatalf("ingest answered %s to events %d..: %s", resp.Status, i, answer.String())
		}
	}
}

// query asks a composed ClickHouse server with clickhouse-client in its
// container, as the `default` user with the password secret.
func (s *shape) query(service, q string) string {
	s.t.Helper()
	out, err := s.run(time.Minute, "exec", "-T", service, "sh", "-c",
		`exec clickhouse-client --password "$(head -n1 /run/secrets/clickhouse_password)" --database harnessflow --query "$0"`, q)
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// counts are the campaign's deduplicated rows, through the server that the
// report reads (Distributed tables in the cluster shape).
func (s *shape) counts() counts {
	s.t.Helper()
	started := "(SELECT cell_id FROM cells FINAL WHERE kind = 'started' AND campaign_id = 'demo')"
	n := func(q string) int {
		v, err := strconv.Atoi(s.query("clickhouse", q))
		if err != nil {
			s.t.Fatalf("%s: %v", q, err)
		}
		return v
	}
	return counts{
		Attempts: n("SELECT count() FROM (SELECT event_id FROM task_attempts FINAL WHERE cell_id GLOBAL IN " + started + ")"),
		Samples:  n("SELECT count() FROM labeled_samples FINAL WHERE campaign_id = 'demo'"),
		Rounds:   n("SELECT count() FROM round_metrics FINAL WHERE campaign_id = 'demo'"),
		Cells:    n("SELECT count() FROM cells FINAL WHERE kind = 'finished' AND cell_id GLOBAL IN " + started),
		Behind:   n(chddl.SummariesBehindSQL("harnessflow", "demo")),
	}
}

// waitSummaries waits until, read through node, every cell's summary covers
// its attempts (chddl.SummariesBehind): the report reads the cells'
// figures from their summaries, which the sinks write after the attempts
// (on a cluster also after the replicas agree), so counts alone do not say
// that the figures are final.
func (s *shape) waitSummaries(node string, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := s.query(node, chddl.SummariesBehindSQL("harnessflow", "demo"))
		if n == "0" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("through %s, %s cells' summaries still miss some of their attempts after %s", node, n, timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// waitResent waits until the campaign sent again has landed: every
// attempt and finished cell that FINAL keeps is the re-sent copy (a later
// Kafka offset, so the higher _version), written at or after since (the
// server's now() before the send, which the sink's _ingested_at follows).
// Then a duplicate, if the pipeline made one, would be in the counts.
func (s *shape) waitResent(since string, want counts, timeout time.Duration) {
	s.t.Helper()
	started := "(SELECT cell_id FROM cells FINAL WHERE kind = 'started' AND campaign_id = 'demo')"
	q := "SELECT toString(count()) FROM task_attempts FINAL WHERE _ingested_at >= toDateTime('" + since + "') AND cell_id GLOBAL IN " + started
	qc := "SELECT toString(count()) FROM cells FINAL WHERE kind = 'finished' AND _ingested_at >= toDateTime('" + since + "') AND cell_id GLOBAL IN " + started
	deadline := time.Now().Add(timeout)
	for {
		a, c := s.query("clickhouse", q), s.query("clickhouse", qc)
		if a == strconv.Itoa(want.Attempts) && c == strconv.Itoa(want.Cells) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the campaign sent again: %s attempts and %s finished cells re-written since %s after %s, want %d and %d", a, c, since, timeout, want.Attempts, want.Cells)
		}
		time.Sleep(3 * time.Second) // polling interval
	}
}

func (s *shape) waitCounts(want counts, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := s.counts()
		if got == want {
			return
		}
		if got.Attempts > want.Attempts || got.Samples > want.Samples || got.Rounds > want.Rounds || got.Cells > want.Cells {
			s.t.Fatalf("ClickHouse holds %+v, more than the campaign's %+v", got, want)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("ClickHouse holds %+v after %s, want %+v", got, timeout, want)
		}
		time.Sleep(3 * time.Second)
	}
}

// report is the compose file's report tool's output.
func (s *shape) report() string {
	s.t.Helper()
	return s.compose(3*time.Minute, "run", "--rm", "-T", "report")
}

// targetsUp waits until Prometheus's targets API lists exactly want
// (host:port), each up.
func (s *shape) targetsUp(want []string) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var got []string
		state := map[string]string{}
		resp, err := http.Get("http://127.0.0.1:9090/api/v1/targets")
		if err == nil {
			var body struct {
				Data struct {
					ActiveTargets []struct {
						Labels    map[string]string `json:"labels"`
						Health    string            `json:"health"`
						LastError string            `json:"lastError"`
					} `json:"activeTargets"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			for _, tg := range body.Data.ActiveTargets {
				got = append(got, tg.Labels["instance"])
				state[tg.Labels["instance"]] = tg.Health + " " + tg.LastError
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		up := err == nil && strings.Join(got, ",") == strings.Join(want, ",")
		for _, w := range want {
			up = up && strings.HasPrefix(state[w], "up")
		}
		if up {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Prometheus targets %v (err %v), want %v all up", state, err, want)
		}
		time.Sleep(3 * time.Second)
	}
}

// waitCheckpoint waits until the trainer's named volume holds a checkpoint,
// read through a container of its own, and returns the volume's files.
func (s *shape) waitCheckpoint() []string {
	s.t.Helper()
	vol := project + "_trainer-checkpoints"
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := docker(time.Minute, "run", "--rm", "-v", vol+":/c:ro", "localhost/harnessflow-base:bookworm", "find", "/c", "-type", "f")
		if err != nil {
			s.t.Fatal(err)
		}
		if files := strings.Fields(out); len(files) > 0 {
			return files
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no checkpoint on %s after 3m", vol)
		}
		time.Sleep(3 * time.Second)
	}
}

// waitLog waits until a service's log since a time has a line with text.
func (s *shape) waitLog(service string, since time.Time, text string, timeout time.Duration) {
	s.t.Helper()
	id := strings.TrimSpace(s.compose(time.Minute, "ps", "-q", service))
	deadline := time.Now().Add(timeout)
	for {
		out, _ := docker(time.Minute, "logs", "--since", since.UTC().Format(time.RFC3339), id)
		if strings.Contains(out, text) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s logged no %q since %s:\n%s", service, text, since.Format(time.RFC3339), tail(out, 30))
		}
		time.Sleep(2 * time.Second)
	}
}

// metricPositive checks that a /metrics page has a sample of a family with
// the prefix that is above zero.
func (s *shape) metricPositive(url, prefix string) {
	s.t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && v > 0 {
			return
		}
	}
	s.t.Errorf("%s: no %s sample above zero", url, prefix)
}

func (s *shape) down() {
	s.t.Helper()
	s.compose(5*time.Minute, "down", "-v", "--remove-orphans", "-t", "20")
	out, err := docker(time.Minute, "volume", "ls", "-q", "--filter", "label=com.docker.compose.project="+project)
	if err != nil {
		s.t.Fatal(err)
	}
	if strings.TrimSpace(out) != "" {
		s.t.Fatalf("down -v left volumes: %s", out)
	}
}

// diagnose logs the project's state and each service's last lines.
func (s *shape) diagnose() {
	out, _ := s.run(time.Minute, "ps")
	s.t.Logf("docker-compose ps:\n%s", out)
	logs, _ := s.run(2*time.Minute, "logs", "--no-color", "--tail", "40")
	s.t.Logf("docker-compose logs --tail 40:\n%s", logs)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
