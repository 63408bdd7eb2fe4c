package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/harnessflow/harnessflow/internal/secret"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// The compose tests read docker-compose.yml (and its cluster override) with
// compose's own loader (compose-go: interpolation, anchors, merge of
// override files, profiles, its consistency checks), never run it: there is
// no Docker here.

// composeShape is one way to run the stack: compose files merged in order.
type composeShape struct {
	name  string
	files []string
}

// composeShapes are the two shapes of the README's production section.
var composeShapes = []composeShape{
	{"single", []string{"docker-compose.yml"}},
	{"cluster", []string{"docker-compose.yml", "docker-compose.cluster.yml"}},
}

// The uid and gid the loads run with, as .env would give them.
const (
	testUID = "4242"
	testGID = "4243"
)

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// loadShape loads a shape with compose's loader, with HF_UID and HF_GID set
// (env) and the given profiles active ("*": all).
func loadShape(t *testing.T, sh composeShape, env []string, profiles ...string) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range sh.files {
		files = append(files, filepath.Join(root, f))
	}
	opts, err := cli.NewProjectOptions(files,
		cli.WithWorkingDirectory(root),
		cli.WithName("harnessflow"),
		cli.WithEnv(env),
		cli.WithProfiles(profiles),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%s shape, profiles %q: %v", sh.name, profiles, err)
	}
	return p
}

// loadCompose loads a shape with every profile active.
func loadCompose(t *testing.T, sh composeShape) *types.Project {
	t.Helper()
	return loadShape(t, sh, []string{"HF_UID=" + testUID, "HF_GID=" + testGID}, "*")
}

// forEachShape runs f once per shape, as a subtest.
func forEachShape(t *testing.T, f func(t *testing.T, sh composeShape, p *types.Project)) {
	for _, sh := range composeShapes {
		t.Run(sh.name, func(t *testing.T) { f(t, sh, loadCompose(t, sh)) })
	}
}

// hfServices are the services built from infra/Dockerfile: they run the
// harnessflow binary.
func hfServices(p *types.Project) map[string]types.ServiceConfig {
	out := map[string]types.ServiceConfig{}
	for name, s := range p.Services {
		if s.Build != nil {
			out[name] = s
		}
	}
	return out
}

func envValue(s types.ServiceConfig, k string) string {
	if v := s.Environment[k]; v != nil {
		return *v
	}
	return ""
}

// longRunning reports whether `up` starts s and keeps it running.
func longRunning(s types.ServiceConfig) bool {
	return s.Restart != "no" && len(s.Profiles) == 0
}

// parseCommand finds a harnessflow service's subcommand and parses its
// flags, as the binary would.
func parseCommand(s types.ServiceConfig) (*cobra.Command, error) {
	root := newRoot()
	cmd, rest, err := root.Find(s.Command)
	if err != nil {
		return nil, err
	}
	if cmd == root || !cmd.Runnable() {
		return nil, fmt.Errorf("%q is not a harnessflow subcommand", s.Command)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return nil, err
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return nil, err
	}
	return cmd, nil
}

// TestComposeProfiles loads every shape with no profile, with each profile
// its files name, and with all of them: each load must pass the loader's
// own checks (every depends_on target, secret and named volume defined and
// enabled), and `up` (no profile) must start the pipeline.
func TestComposeProfiles(t *testing.T) {
	t.Parallel()
	env := []string{"HF_UID=" + testUID, "HF_GID=" + testGID}
	for _, sh := range composeShapes {
		all := loadShape(t, sh, env, "*")
		profiles := map[string]bool{}
		for _, s := range all.Services {
			for _, pr := range s.Profiles {
				profiles[pr] = true
			}
		}
		if !profiles["tools"] {
			t.Errorf("%s: no tools profile (simulate, report)", sh.name)
		}
		loads := [][]string{nil}
		for pr := range profiles {
			loads = append(loads, []string{pr})
		}
		for _, prs := range loads {
			p := loadShape(t, sh, env, prs...)
			for name, s := range p.Services {
				for dep := range s.DependsOn {
					if _, ok := p.Services[dep]; !ok {
						t.Errorf("%s %q: %s depends on %s, which is not enabled", sh.name, prs, name, dep)
					}
				}
				for _, sec := range s.Secrets {
					if _, ok := p.Secrets[sec.Source]; !ok {
						t.Errorf("%s %q: %s mounts secret %s, which is not declared", sh.name, prs, name, sec.Source)
					}
				}
				for _, v := range s.Volumes {
					if v.Type == types.VolumeTypeVolume {
						if _, ok := p.Volumes[v.Source]; !ok {
							t.Errorf("%s %q: %s mounts volume %s, which is not declared", sh.name, prs, name, v.Source)
						}
					}
				}
			}
			if prs == nil {
				for _, want := range []string{"migrate", "processor1", "sink", "trainer", "ingest"} {
					if _, ok := p.Services[want]; !ok {
						t.Errorf("%s: `up` does not start %s", sh.name, want)
					}
				}
			}
		}
	}
}

// TestComposeCommands checks that every harnessflow service runs a real
// subcommand with flags that parse, and that the files have the promised
// shape.
func TestComposeCommands(t *testing.T) {
	t.Parallel()
	forEachShape(t, func(t *testing.T, sh composeShape, c *types.Project) {
		root, _ := filepath.Abs(repoRoot(t))
		for _, name := range []string{"kafka1", "kafka2", "kafka3", "clickhouse", "processor1", "processor2", "sink", "trainer", "ingest", "prometheus", "grafana"} {
			if _, ok := c.Services[name]; !ok {
				t.Errorf("service %s missing", name)
			}
		}
		subcommands := map[string]int{}
		for name, s := range c.Services {
			// Plain Docker Hub names only: no registry host in image references.
			if first, _, ok := strings.Cut(s.Image, "/"); ok && strings.ContainsAny(first, ".:") {
				t.Errorf("%s: image %q names a registry host", name, s.Image)
			}
			for _, p := range s.Ports {
				if p.HostIP != "127.0.0.1" || p.Published == "" || p.Target == 0 {
					t.Errorf("%s: port %+v is not published on loopback as 127.0.0.1:HOST:CONTAINER", name, p)
				}
			}
			long := longRunning(s)
			if long && s.HealthCheck == nil {
				t.Errorf("%s: long-running service without a health check", name)
			}
			if s.Build == nil {
				if !strings.HasPrefix(s.Image, "apache/kafka:3.") && !strings.HasPrefix(s.Image, "clickhouse/clickhouse-server:26.8") &&
					!strings.HasPrefix(s.Image, "clickhouse/clickhouse-keeper:26.8") &&
					!strings.HasPrefix(s.Image, "prom/prometheus:v3.") && !strings.HasPrefix(s.Image, "grafana/grafana:11.") {
					t.Errorf("%s: unexpected image %q", name, s.Image)
				}
				continue
			}
			if s.Build.Dockerfile != "infra/Dockerfile" || filepath.Clean(s.Build.Context) != root || s.Image != "harnessflow:local" {
				t.Errorf("%s: build %s %s image %s, want context . and infra/Dockerfile, image harnessflow:local", name, s.Build.Context, s.Build.Dockerfile, s.Image)
			}
			if len(s.Command) == 0 {
				t.Errorf("%s: no command", name)
				continue
			}
			cmd, err := parseCommand(s)
			if err != nil {
				t.Errorf("%s: %q: %v", name, s.Command, err)
				continue
			}
			// Every HF_ variable but the logger's is a flag's (env.go).
			for k := range s.Environment {
				if !strings.HasPrefix(k, "HF_") || k == "HF_LOG_LEVEL" {
					continue
				}
				found := false
				cmd.Flags().VisitAll(func(f *pflag.Flag) { found = found || envName(f.Name) == k })
				if !found {
					t.Errorf("%s: environment %s is no flag of %s", name, k, cmd.Name())
				}
			}
			subcommands[cmd.Name()]++
			if long && len(s.DependsOn) == 0 {
				t.Errorf("%s: no depends_on", name)
			}
		}
		sinks := 1
		if sh.name == "cluster" {
			sinks = 2 // one per shard
		}
		if subcommands["process"] != 2 || subcommands["sink"] != sinks || subcommands["train"] != 1 || subcommands["ingest"] != 1 || subcommands["migrate"] != 1 {
			t.Errorf("harnessflow services: %v (want migrate, two processors, %d sink(s), a trainer, ingest)", subcommands, sinks)
		}
		// KRaft: three combined broker/controller nodes in one quorum.
		for _, n := range []string{"kafka1", "kafka2", "kafka3"} {
			s := c.Services[n]
			if envValue(s, "KAFKA_PROCESS_ROLES") != "broker,controller" || !strings.Contains(envValue(s, "KAFKA_CONTROLLER_QUORUM_VOTERS"), "3@kafka3:9093") {
				t.Errorf("%s: not a KRaft quorum member: %v", n, s.Environment)
			}
		}
		if _, ok := c.Secrets["ingest_tokens"]; !ok {
			t.Error("ingest's token file is not a secret")
		}
	})
}

// TestComposeMounts checks every service's mounts: a bind mount's source is
// a file or folder of the repository, and every named volume of a service
// built from infra/Dockerfile is mounted on a path the Dockerfile creates
// owned by the image's user, which is the user the service runs as.
// Otherwise Docker creates the path owned by root and the service, which
// runs as HF_UID, fails with EACCES (the trainer's checkpoints did).
func TestComposeMounts(t *testing.T) {
	t.Parallel()
	created, owned, args := dockerfilePaths(t)
	if args["HF_UID"] != "10001" || args["HF_GID"] != "10001" {
		t.Errorf("infra/Dockerfile: ARG HF_UID, HF_GID defaults %q, %q; want 10001 (compose's default)", args["HF_UID"], args["HF_GID"])
	}
	forEachShape(t, func(t *testing.T, sh composeShape, c *types.Project) {
		root, _ := filepath.Abs(repoRoot(t))
		for name, s := range c.Services {
			for _, v := range s.Volumes {
				switch v.Type {
				case types.VolumeTypeBind:
					rel, err := filepath.Rel(root, v.Source)
					if err != nil || strings.HasPrefix(rel, "..") {
						t.Errorf("%s: bind mount %s is outside the repository", name, v.Source)
						continue
					}
					if _, err := os.Stat(v.Source); err != nil {
						t.Errorf("%s: bind mount %s: %v", name, rel, err)
					}
					if !v.ReadOnly {
						t.Errorf("%s: bind mount %s is not read-only", name, rel)
					}
				case types.VolumeTypeVolume:
					if s.Build == nil {
						continue // the image's own paths (see the report in docs)
					}
					if !created(v.Target) || !owned(v.Target) {
						t.Errorf("%s: volume %s on %s, which infra/Dockerfile does not create (mkdir -p) owned by the runtime user (chown \"$HF_UID:$HF_GID\"): Docker would create it owned by root", name, v.Source, v.Target)
					}
				default:
					t.Errorf("%s: mount %+v: want a read-only bind mount or a named volume", name, v)
				}
			}
		}
		// The image's user is the user the services run as: both follow
		// HF_UID and HF_GID.
		for name, s := range hfServices(c) {
			if s.User != testUID+":"+testGID {
				t.Errorf("%s: user %q, want ${HF_UID:-10001}:${HF_GID:-10001}", name, s.User)
			}
			if a := s.Build.Args; a["HF_UID"] == nil || *a["HF_UID"] != testUID || a["HF_GID"] == nil || *a["HF_GID"] != testGID {
				t.Errorf("%s: build args %v, want HF_UID and HF_GID from .env, as its user", name, a)
			}
		}
		// Without .env: the Dockerfile's defaults.
		for name, s := range hfServices(loadShape(t, sh, nil, "*")) {
			if a := s.Build.Args["HF_UID"]; s.User != "10001:10001" || a == nil || *a != "10001" {
				t.Errorf("%s: without .env, user %q and build args %v; want 10001, the Dockerfile's default", name, s.User, s.Build.Args)
			}
		}
	})
}

// dockerfilePaths reads infra/Dockerfile's final stage: the paths its RUN
// lines create (mkdir, useradd --create-home) and those they give the
// runtime user (chown "$HF_UID:$HF_GID", -R for what lies below), and its
// ARG defaults.
func dockerfilePaths(t *testing.T) (created, owned func(string) bool, args map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		made       []string
		ownedPaths = map[string]bool{} // path -> recursive
	)
	args = map[string]string{}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM": // only the final stage counts
			made, ownedPaths, args = nil, map[string]bool{}, map[string]string{}
		case "ARG":
			for _, a := range f[1:] {
				k, v, _ := strings.Cut(a, "=")
				args[k] = v
			}
		case "RUN":
			for _, sh := range regexp.MustCompile(`&&|;`).Split(strings.Join(f[1:], " "), -1) {
				w := strings.Fields(strings.ReplaceAll(sh, `"`, ""))
				if len(w) == 0 {
					continue
				}
				var operands []string
				flags := map[string]string{}
				for i := 1; i < len(w); i++ {
					if strings.HasPrefix(w[i], "-") {
						if w[0] == "useradd" && (w[i] == "--home-dir" || w[i] == "-d") && i+1 < len(w) {
							flags["home"] = w[i+1]
							i++
						}
						flags[w[i]] = "set"
						continue
					}
					operands = append(operands, w[i])
				}
				switch w[0] {
				case "mkdir":
					made = append(made, operands...)
				case "chown":
					if len(operands) > 1 && (operands[0] == "$HF_UID:$HF_GID" || operands[0] == "${HF_UID}:${HF_GID}") {
						for _, p := range operands[1:] {
							ownedPaths[path.Clean(p)] = flags["-R"] != "" || flags["--recursive"] != ""
						}
					}
				case "useradd":
					if flags["--create-home"] != "" || flags["-m"] != "" {
						made = append(made, flags["home"])
						ownedPaths[path.Clean(flags["home"])] = ownedPaths[path.Clean(flags["home"])]
					}
				}
			}
		}
	}
	created = func(p string) bool {
		p = path.Clean(p)
		for _, m := range made {
			// mkdir -p creates m's parents too.
			if m = path.Clean(m); m == p || strings.HasPrefix(m, p+"/") {
				return true
			}
		}
		return false
	}
	owned = func(p string) bool {
		p = path.Clean(p)
		for o, recursive := range ownedPaths {
			if o == p || (recursive && strings.HasPrefix(p, o+"/")) {
				return true
			}
		}
		return false
	}
	return created, owned, args
}

func TestDockerfileBuildsTheBinary(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"go build", "./cmd/harnessflow", "ENTRYPOINT [\"/usr/local/bin/harnessflow\"]", "curl", "git", "COPY . ."} {
		if !strings.Contains(s, want) {
			t.Errorf("infra/Dockerfile lacks %q", want)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
			if first, _, ok := strings.Cut(f[1], "/"); ok && strings.ContainsAny(first, ".:") {
				t.Errorf("FROM %s names a registry host", f[1])
			}
		}
	}
}

// TestDockerignore checks the build context: .dockerignore keeps the
// credentials, local state, version control and build output out of
// `COPY . .`, and keeps every file the build reads: go.mod, go.sum and,
// per `go list -deps ./cmd/harnessflow` (CGO_ENABLED=0, as the Dockerfile
// builds), each package's Go files and embedded files.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatalf("no .dockerignore: `COPY . .` would send secrets/, .harnessflow/, bin/ and .git into the build: %v", err)
	}
	var patterns []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, p := range []string{"secrets/clickhouse_password", "secrets/.gitignore", ".env", ".harnessflow/trainer/ckpt", "bin/harnessflow",
		".git/HEAD", "harnessflow", "cmd/harnessflow/harnessflow.test", "schemas/testdata/x.bin", "bench/results/x.tmp"} {
		if !dockerignored(patterns, p) {
			t.Errorf(".dockerignore sends %s into the build", p)
		}
	}
	needed := []string{"go.mod", "go.sum"}
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,Standard,GoFiles,EmbedFiles", "./cmd/harnessflow")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	absRoot, _ := filepath.Abs(root)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var pkg struct {
			Dir                 string
			Standard            bool
			GoFiles, EmbedFiles []string
		}
		if err := dec.Decode(&pkg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(absRoot, pkg.Dir)
		if pkg.Standard || err != nil || strings.HasPrefix(rel, "..") {
			continue // the standard library and the module cache
		}
		for _, f := range append(pkg.GoFiles, pkg.EmbedFiles...) {
			needed = append(needed, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	if len(needed) < 50 {
		t.Fatalf("go list found %d files the build reads; want the module's packages", len(needed))
	}
	for _, f := range needed {
		if dockerignored(patterns, f) {
			t.Errorf(".dockerignore leaves out %s, which the build reads", f)
		}
	}
}

// dockerignored reports whether .dockerignore's patterns leave path (slash
// separated, relative to the context) out: the last pattern that matches it
// or one of its parent folders decides, `!` patterns bring it back.
// Patterns are anchored at the context root; * and ? stop at /, ** does not.
func dockerignored(patterns []string, p string) bool {
	ignored := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		pat = strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(pat, "!")), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(pat); i++ {
			switch {
			case strings.HasPrefix(pat[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(pat[i:], "**"):
				re.WriteString(".*")
				i++
			case pat[i] == '*':
				re.WriteString("[^/]*")
			case pat[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(pat[i : i+1]))
			}
		}
		re.WriteString("$")
		rx := regexp.MustCompile(re.String())
		for q := p; q != "." && q != "/"; q = path.Dir(q) {
			if rx.MatchString(q) {
				ignored = !neg
				break
			}
		}
	}
	return ignored
}

// mounts returns a service's bind mounts: container path -> host path
// (relative to the repository root).
func mounts(t *testing.T, s types.ServiceConfig) map[string]string {
	root, _ := filepath.Abs(repoRoot(t))
	out := map[string]string{}
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind {
			rel, _ := filepath.Rel(root, v.Source)
			out[v.Target] = filepath.ToSlash(rel)
		}
	}
	return out
}

// TestComposeMonitoring checks the prometheus and grafana services against
// the files they mount: Prometheus reads infra/prometheus/prometheus.yml,
// which scrapes every harnessflow service that serves /metrics (--listen)
// on its port and nothing else; Grafana provisions infra/grafana, whose
// dashboards folder is mounted where its provider looks, and whose data
// sources name compose services.
func TestComposeMonitoring(t *testing.T) {
	t.Parallel()
	forEachShape(t, func(t *testing.T, sh composeShape, c *types.Project) {
		root := repoRoot(t)
		prom, graf := c.Services["prometheus"], c.Services["grafana"]
		if m := mounts(t, prom); m["/etc/prometheus"] != "infra/prometheus" {
			t.Errorf("prometheus mounts %v, want ./infra/prometheus at /etc/prometheus", m)
		}
		if !strings.Contains(strings.Join(prom.Command, " "), "--config.file=/etc/prometheus/prometheus.yml") {
			t.Errorf("prometheus command %q does not read /etc/prometheus/prometheus.yml", prom.Command)
		}

		// What prometheus.yml scrapes against what the services serve.
		data, err := os.ReadFile(filepath.Join(root, "infra", "prometheus", "prometheus.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var pc struct {
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		if err := yaml.Unmarshal(data, &pc); err != nil {
			t.Fatal(err)
		}
		scraped := map[string]string{} // host:port -> job
		for _, sc := range pc.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				for _, tg := range st.Targets {
					scraped[tg] = sc.JobName
				}
			}
		}
		serving := map[string]string{} // host:port -> service
		for name, s := range hfServices(c) {
			if !longRunning(s) {
				continue
			}
			for i, a := range s.Command {
				if a == "--listen" && i+1 < len(s.Command) {
					_, port, _ := strings.Cut(s.Command[i+1], ":")
					serving[name+":"+port] = name
				}
			}
		}
		// The cluster shape's second sink: infra/prometheus/prometheus.yml
		// (not the compose files') does not list it yet.
		unscraped := map[string]bool{"sink2:9464": sh.name == "cluster"}
		for addr, name := range serving {
			if _, ok := scraped[addr]; !ok && !unscraped[addr] {
				t.Errorf("%s serves /metrics on %s, which prometheus.yml does not scrape", name, addr)
			}
		}
		for addr, job := range scraped {
			if _, ok := serving[addr]; !ok {
				t.Errorf("prometheus.yml job %s scrapes %s, which no harnessflow service serves", job, addr)
			}
		}

		m := mounts(t, graf)
		if m["/etc/grafana/provisioning"] != "infra/grafana/provisioning" || m["/var/lib/grafana/dashboards"] != "infra/grafana/dashboards" {
			t.Errorf("grafana mounts %v, want infra/grafana/provisioning and infra/grafana/dashboards", m)
		}
		data, err = os.ReadFile(filepath.Join(root, "infra", "grafana", "provisioning", "dashboards", "harnessflow.yml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "path: /var/lib/grafana/dashboards") {
			t.Error("the dashboards provider does not read /var/lib/grafana/dashboards, where compose mounts them")
		}
		data, err = os.ReadFile(filepath.Join(root, "infra", "grafana", "provisioning", "datasources", "harnessflow.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var ds struct {
			Datasources []struct {
				URL      string         `yaml:"url"`
				JSONData map[string]any `yaml:"jsonData"`
			} `yaml:"datasources"`
		}
		if err := yaml.Unmarshal(data, &ds); err != nil {
			t.Fatal(err)
		}
		for _, d := range ds.Datasources {
			host, _ := d.JSONData["host"].(string)
			if d.URL != "" {
				host, _, _ = strings.Cut(strings.TrimPrefix(d.URL, "http://"), ":")
			}
			if _, ok := c.Services[host]; !ok {
				t.Errorf("grafana data source names host %q, no compose service", host)
			}
		}
		if !strings.Contains(envValue(graf, "GF_INSTALL_PLUGINS"), "grafana-clickhouse-datasource") {
			t.Error("grafana does not install grafana-clickhouse-datasource")
		}
	})
}

// composeSecretFiles returns a project's secrets: name -> file (relative to
// the repository root).
func composeSecretFiles(t *testing.T, c *types.Project) map[string]string {
	t.Helper()
	root, _ := filepath.Abs(repoRoot(t))
	out := map[string]string{}
	for name, s := range c.Secrets {
		rel, err := filepath.Rel(root, s.File)
		if err != nil || !strings.HasPrefix(filepath.ToSlash(rel), "secrets/") {
			t.Errorf("secret %s: file %q, want one under ./secrets/ (generated, never committed)", name, s.File)
		}
		out[name] = filepath.ToSlash(rel)
	}
	return out
}

var runSecret = regexp.MustCompile(`/run/secrets/([A-Za-z0-9_.-]+)`)

// secretMounted reports (t.Errorf) the /run/secrets/NAME paths of text that
// service s does not mount or that are not compose secrets.
func secretMounted(t *testing.T, c *types.Project, name string, s types.ServiceConfig, text string) {
	t.Helper()
	for _, m := range runSecret.FindAllStringSubmatch(text, -1) {
		if !slices.ContainsFunc(s.Secrets, func(sc types.ServiceSecretConfig) bool {
			return sc.Source == m[1] && (sc.Target == "" || sc.Target == m[1] || sc.Target == "/run/secrets/"+m[1])
		}) {
			t.Errorf("%s: uses /run/secrets/%s but does not mount secret %s there", name, m[1], m[1])
		}
		if _, ok := c.Secrets[m[1]]; !ok {
			t.Errorf("%s: secret %s is not defined", name, m[1])
		}
	}
}

// clickhouseServers are the project's clickhouse-server services.
func clickhouseServers(c *types.Project) map[string]types.ServiceConfig {
	out := map[string]types.ServiceConfig{}
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "clickhouse/clickhouse-server:") {
			out[name] = s
		}
	}
	return out
}

// TestComposeCredentials checks that compose runs with credentials: the
// ClickHouse `default` user gets its password from a secret, the brokers
// accept SASL only, every harnessflow service that reaches Kafka or
// ClickHouse passes the SASL and password flags (which parse) with secrets it
// mounts, and infra/scripts/compose-secrets.sh generates every secret file,
// with the modes harnessflow accepts and the users the brokers know.
func TestComposeCredentials(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	forEachShape(t, func(t *testing.T, sh composeShape, c *types.Project) {
		for k, v := range composeSecretFiles(t, c) {
			files[k] = v
		}
		for name, ch := range clickhouseServers(c) {
			if envValue(ch, "CLICKHOUSE_PASSWORD_FILE") != "/run/secrets/clickhouse_password" || ch.Environment["CLICKHOUSE_SKIP_USER_SETUP"] != nil {
				t.Errorf("%s: environment %v, want CLICKHOUSE_PASSWORD_FILE=/run/secrets/clickhouse_password and no passwordless default user", name, ch.Environment)
			}
			secretMounted(t, c, name, ch, fmt.Sprint(ch.Environment))
			if hc := fmt.Sprint(ch.HealthCheck.Test); !strings.Contains(hc, "/run/secrets/clickhouse_password") {
				t.Errorf("%s: health check %s logs in without the password", name, hc)
			}
			secretMounted(t, c, name, ch, fmt.Sprint(ch.HealthCheck.Test))
		}

		for _, n := range []string{"kafka1", "kafka2", "kafka3"} {
			s := c.Services[n]
			env := func(k string) string { return envValue(s, k) }
			protocols := map[string]string{}
			for _, kv := range strings.Split(env("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"), ",") {
				k, v, _ := strings.Cut(kv, ":")
				protocols[k] = v
			}
			for _, l := range strings.Split(env("KAFKA_ADVERTISED_LISTENERS"), ",") {
				name, _, _ := strings.Cut(l, "://")
				if !strings.HasPrefix(protocols[name], "SASL_") {
					t.Errorf("%s: advertised listener %s is %q, want SASL_PLAINTEXT or SASL_SSL", n, name, protocols[name])
				}
			}
			if !strings.HasPrefix(protocols[env("KAFKA_INTER_BROKER_LISTENER_NAME")], "SASL_") || env("KAFKA_SASL_MECHANISM_INTER_BROKER_PROTOCOL") != "PLAIN" ||
				!slices.Contains(strings.Split(env("KAFKA_SASL_ENABLED_MECHANISMS"), ","), "PLAIN") {
				t.Errorf("%s: brokers do not talk SASL/PLAIN between themselves: %v", n, s.Environment)
			}
			if !strings.Contains(env("KAFKA_OPTS"), "-Djava.security.auth.login.config=/run/secrets/kafka_jaas") {
				t.Errorf("%s: KAFKA_OPTS %q does not name the JAAS secret", n, env("KAFKA_OPTS"))
			}
			secretMounted(t, c, n, s, env("KAFKA_OPTS"))
			if hc := fmt.Sprint(s.HealthCheck.Test); !strings.Contains(hc, "--command-config /run/secrets/") {
				t.Errorf("%s: health check %s has no SASL client config", n, hc)
			}
			secretMounted(t, c, n, s, fmt.Sprint(s.HealthCheck.Test))
		}

		// Grafana's ClickHouse data source logs in with the same secret.
		ds, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "grafana", "provisioning", "datasources", "harnessflow.yml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(ds), "password: $__file{/run/secrets/clickhouse_password}") {
			t.Error("grafana: the ClickHouse data source has no password from /run/secrets/clickhouse_password")
		}
		secretMounted(t, c, "grafana", c.Services["grafana"], string(ds))
		if g := c.Services["grafana"]; g.User != testUID+":"+testGID {
			t.Errorf("grafana: user %q, want the secret files' owner", g.User)
		}

		for name, s := range hfServices(c) {
			cmd, err := parseCommand(s)
			if err != nil {
				continue // TestComposeCommands reports it
			}
			secretMounted(t, c, name, s, strings.Join(s.Command, " "))
			get := func(flag string) string { v, _ := cmd.Flags().GetString(flag); return v }
			if f := cmd.Flags().Lookup("brokers"); f != nil && f.Changed {
				if get("kafka-sasl") != "plain" || get("kafka-user") != "harnessflow" || get("kafka-password-file") != "/run/secrets/kafka_password" {
					t.Errorf("%s: reaches Kafka without --kafka-sasl plain --kafka-user harnessflow --kafka-password-file /run/secrets/kafka_password: %q", name, s.Command)
				}
			}
			if f := cmd.Flags().Lookup("clickhouse"); f != nil && f.Changed {
				if get("clickhouse-password-file") != "/run/secrets/clickhouse_password" {
					t.Errorf("%s: reaches ClickHouse without --clickhouse-password-file /run/secrets/clickhouse_password: %q", name, s.Command)
				}
			}
		}
	})

	// The generation script: every secret file, harnessflow's readable by
	// harnessflow (0600, one line), the brokers' naming the services' user
	// with its password; a second run keeps the passwords.
	dir := t.TempDir()
	gen := func() {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join(repoRoot(t), "infra", "scripts", "compose-secrets.sh"))
		cmd.Env = append(os.Environ(), "HF_COMPOSE_DIR="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
		}
	}
	gen()
	read := func(secret string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, files[secret]))
		if err != nil {
			t.Fatalf("secret %s: %v", secret, err)
		}
		return string(b)
	}
	for secret := range files {
		read(secret)
	}
	pw := map[string]string{}
	for _, name := range []string{"clickhouse_password", "kafka_password", "ingest_tokens"} {
		p, err := secret.FirstLine(filepath.Join(dir, files[name]), name)
		if err != nil || len(p) < 16 {
			t.Fatalf("secret %s: %q, %v", name, p, err)
		}
		pw[name] = p
	}
	jaas := read("kafka_jaas")
	if !strings.Contains(jaas, `user_harnessflow="`+pw["kafka_password"]+`"`) {
		t.Errorf("kafka_jaas does not accept user harnessflow with kafka_password:\n%s", jaas)
	}
	m := regexp.MustCompile(`username="broker"\s+password="([0-9a-f]+)"`).FindStringSubmatch(jaas)
	if m == nil || !strings.Contains(jaas, `user_broker="`+m[1]+`"`) || !strings.Contains(read("kafka_client"), `username="broker" password="`+m[1]+`"`) {
		t.Errorf("the brokers' own login is not one they accept, or not the health check's:\n%s\n%s", jaas, read("kafka_client"))
	}
	// The cluster's inter-server secret: an XML file whose element is the
	// one cluster.xml substitutes (incl=), readable by the clickhouse image's
	// user.
	var inc struct {
		Secret string `xml:"hf_cluster_secret"`
	}
	if err := xml.Unmarshal([]byte(read("clickhouse_cluster_secret")), &inc); err != nil || len(inc.Secret) < 16 {
		t.Errorf("clickhouse_cluster_secret: %q, %v; want <clickhouse><hf_cluster_secret>SECRET</...>", inc.Secret, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, files["clickhouse_cluster_secret"])); err != nil || fi.Mode().Perm()&0o004 == 0 {
		t.Errorf("clickhouse_cluster_secret: %v, %v; want it readable by the clickhouse image's user (0644, as kafka_jaas)", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, ".env")); err != nil || !strings.Contains(string(b), fmt.Sprintf("HF_UID=%d\n", os.Getuid())) {
		t.Errorf(".env: %q, %v; want HF_UID=%d", b, err, os.Getuid())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "secrets", ".gitignore")); err != nil || !strings.Contains(string(b), "*") {
		t.Errorf("secrets/.gitignore does not ignore the secrets: %q, %v", b, err)
	}
	cs := read("clickhouse_cluster_secret")
	gen()
	if p, _ := secret.FirstLine(filepath.Join(dir, files["kafka_password"]), "kafka_password"); p != pw["kafka_password"] {
		t.Error("a second run replaced kafka_password")
	}
	if read("clickhouse_cluster_secret") != cs {
		t.Error("a second run replaced clickhouse_cluster_secret")
	}
}

// chConfig is what the compose tests read of a ClickHouse or Keeper config
// file.
type chConfig struct {
	IncludeFrom   string `xml:"include_from"`
	RemoteServers struct {
		Clusters []struct {
			XMLName xml.Name
			Secret  struct {
				Incl string `xml:"incl,attr"`
			} `xml:"secret"`
			Shards []struct {
				InternalReplication bool `xml:"internal_replication"`
				Replicas            []struct {
					Host string `xml:"host"`
					Port string `xml:"port"`
				} `xml:"replica"`
			} `xml:"shard"`
		} `xml:",any"`
	} `xml:"remote_servers"`
	ZooKeeper struct {
		Nodes []struct {
			Host string `xml:"host"`
			Port string `xml:"port"`
		} `xml:"node"`
	} `xml:"zookeeper"`
	DistributedDDL struct {
		Path string `xml:"path"`
	} `xml:"distributed_ddl"`
	Macros struct {
		Shard   string `xml:"shard"`
		Replica string `xml:"replica"`
	} `xml:"macros"`
	InterserverHTTPHost string `xml:"interserver_http_host"`
	KeeperServer        struct {
		TCPPort  string `xml:"tcp_port"`
		ServerID string `xml:"server_id"`
		Raft     struct {
			Servers []struct {
				ID       string `xml:"id"`
				Hostname string `xml:"hostname"`
			} `xml:"server"`
		} `xml:"raft_configuration"`
	} `xml:"keeper_server"`
}

// readCHConfig parses a repository file mounted into a ClickHouse container.
func readCHConfig(t *testing.T, rel string) chConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	var c chConfig
	if err := xml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return c
}

// clusterFlag is the cluster the harnessflow services of the cluster shape
// name (--cluster), and remote_servers' cluster.
const clusterFlag = "hf"

// TestComposeCluster checks the cluster shape against its ClickHouse
// configuration: every server mounts the one cluster.xml and a node file;
// remote_servers' cluster hf has 2 shards × 2 replicas with internal
// replication, whose hosts are exactly the servers, each with the macros of
// its place (shard NN, replica rN, unique) and its own host name for
// interserver HTTP; <zookeeper> names the Keeper service on the port its
// config serves; the DDL queue has a path; the inter-server secret comes
// from a secret every server mounts. The harnessflow services run
// docker-compose.yml's commands, plus --cluster hf for those that reach
// ClickHouse (migrate, sinks, trainer), which reach a server of the
// cluster; the two sinks write through different shards.
func TestComposeCluster(t *testing.T) {
	t.Parallel()
	single := loadCompose(t, composeShapes[0])
	c := loadCompose(t, composeShapes[1])

	servers := clickhouseServers(c)
	nodeFiles := map[string]string{} // service -> node config file
	var clusterFile string
	for name, s := range servers {
		m := mounts(t, s)
		cf, nf := m["/etc/clickhouse-server/config.d/cluster.xml"], m["/etc/clickhouse-server/config.d/node.xml"]
		if cf == "" || nf == "" {
			t.Errorf("%s: mounts %v, want config.d/cluster.xml and config.d/node.xml", name, m)
			continue
		}
		if clusterFile != "" && cf != clusterFile {
			t.Errorf("%s: mounts %s as cluster.xml, others %s", name, cf, clusterFile)
		}
		clusterFile, nodeFiles[name] = cf, nf
		if s.Hostname != name {
			t.Errorf("%s: hostname %q, want the service name (remote_servers names it)", name, s.Hostname)
		}
	}
	if len(servers) != 4 || clusterFile == "" {
		t.Fatalf("cluster shape: %d clickhouse-server services, want 2 shards × 2 replicas", len(servers))
	}
	cfg := readCHConfig(t, clusterFile)
	if len(cfg.RemoteServers.Clusters) != 1 || cfg.RemoteServers.Clusters[0].XMLName.Local != clusterFlag {
		t.Fatalf("%s: remote_servers %+v, want one cluster %s", clusterFile, cfg.RemoteServers.Clusters, clusterFlag)
	}
	cl := cfg.RemoteServers.Clusters[0]
	if len(cl.Shards) != 2 {
		t.Errorf("%s: %d shards, want 2", clusterFile, len(cl.Shards))
	}
	place := map[string][2]int{} // host -> shard, replica (1-based)
	for i, sh := range cl.Shards {
		if !sh.InternalReplication {
			t.Errorf("%s: shard %d without internal_replication", clusterFile, i+1)
		}
		if len(sh.Replicas) != 2 {
			t.Errorf("%s: shard %d has %d replicas, want 2", clusterFile, i+1, len(sh.Replicas))
		}
		for j, r := range sh.Replicas {
			if _, dup := place[r.Host]; dup {
				t.Errorf("%s: host %s is in the cluster twice", clusterFile, r.Host)
			}
			place[r.Host] = [2]int{i + 1, j + 1}
			if r.Port != "9000" {
				t.Errorf("%s: %s port %s, want the native port 9000", clusterFile, r.Host, r.Port)
			}
		}
	}
	macros := map[[2]string]string{}
	for name, nf := range nodeFiles {
		pl, ok := place[name]
		if !ok {
			t.Errorf("%s: a server that remote_servers does not list", name)
			continue
		}
		n := readCHConfig(t, nf)
		if want := fmt.Sprintf("%02d", pl[0]); n.Macros.Shard != want {
			t.Errorf("%s (%s): macro shard %q, want %q", name, nf, n.Macros.Shard, want)
		}
		if want := fmt.Sprintf("r%d", pl[1]); n.Macros.Replica != want {
			t.Errorf("%s (%s): macro replica %q, want %q", name, nf, n.Macros.Replica, want)
		}
		if n.InterserverHTTPHost != name {
			t.Errorf("%s (%s): interserver_http_host %q, want %q", name, nf, n.InterserverHTTPHost, name)
		}
		k := [2]string{n.Macros.Shard, n.Macros.Replica}
		if other, dup := macros[k]; dup {
			t.Errorf("%s and %s have the same macros %v", name, other, k)
		}
		macros[k] = name
	}
	for host := range place {
		if _, ok := servers[host]; !ok {
			t.Errorf("%s: remote_servers names %s, no clickhouse-server service", clusterFile, host)
		}
	}

	// Keeper: the zookeeper section names it, on the port it serves.
	if len(cfg.ZooKeeper.Nodes) == 0 {
		t.Errorf("%s: no <zookeeper> nodes", clusterFile)
	}
	for _, zk := range cfg.ZooKeeper.Nodes {
		k, ok := c.Services[zk.Host]
		if !ok {
			t.Errorf("%s: zookeeper node %s is no compose service", clusterFile, zk.Host)
			continue
		}
		kf := mounts(t, k)["/etc/clickhouse-keeper/keeper_config.xml"]
		if kf == "" {
			t.Errorf("%s: mounts no keeper_config.xml", zk.Host)
			continue
		}
		kc := readCHConfig(t, kf)
		if kc.KeeperServer.TCPPort != zk.Port {
			t.Errorf("%s: zookeeper %s:%s, but %s serves tcp_port %s", clusterFile, zk.Host, zk.Port, kf, kc.KeeperServer.TCPPort)
		}
		raft := kc.KeeperServer.Raft.Servers
		if !slices.ContainsFunc(raft, func(s struct {
			ID       string `xml:"id"`
			Hostname string `xml:"hostname"`
		}) bool {
			return s.ID == kc.KeeperServer.ServerID && s.Hostname == k.Hostname
		}) {
			t.Errorf("%s: raft_configuration %+v does not list server_id %s as %s", kf, raft, kc.KeeperServer.ServerID, k.Hostname)
		}
		for name, s := range servers {
			if _, ok := s.DependsOn[zk.Host]; !ok {
				t.Errorf("%s: does not depend on %s", name, zk.Host)
			}
		}
	}
	if cfg.DistributedDDL.Path == "" {
		t.Errorf("%s: no distributed_ddl path", clusterFile)
	}
	// The inter-server secret.
	m := runSecret.FindStringSubmatch(cfg.IncludeFrom)
	if m == nil || cl.Secret.Incl != "hf_cluster_secret" {
		t.Errorf("%s: include_from %q, secret incl %q; want a /run/secrets file and hf_cluster_secret", clusterFile, cfg.IncludeFrom, cl.Secret.Incl)
	} else {
		for name, s := range servers {
			secretMounted(t, c, name, s, cfg.IncludeFrom)
		}
	}

	// The services: docker-compose.yml's commands plus --cluster hf.
	var sinkShards []int
	for name, s := range hfServices(c) {
		cmd, err := parseCommand(s)
		if err != nil {
			t.Errorf("%s: %q: %v (the cluster shape needs --cluster on migrate, sink and train)", name, s.Command, err)
			continue
		}
		switch cmd.Name() {
		case "migrate", "sink", "train": // the ClickHouse clients; the processors touch only Kafka
			if v, _ := cmd.Flags().GetString("cluster"); v != clusterFlag {
				t.Errorf("%s: --cluster %q, want %s", name, v, clusterFlag)
			}
		}
		if f := cmd.Flags().Lookup("clickhouse"); f != nil && f.Changed {
			nodes := strings.Split(f.Value.String(), ",")
			for _, n := range nodes {
				host, _, _ := strings.Cut(n, ":")
				if _, ok := place[host]; !ok {
					t.Errorf("%s: --clickhouse %s: %s is no server of cluster %s", name, f.Value, n, clusterFlag)
				}
			}
			// The long-running clients fail over (docs/operations.md: "each
			// with --clickhouse listing two or more nodes").
			if (cmd.Name() == "sink" || cmd.Name() == "train") && len(nodes) < 2 {
				t.Errorf("%s: --clickhouse %s lists one node; list two or more to fail over", name, f.Value)
			}
			if cmd.Name() == "sink" {
				first, _, _ := strings.Cut(nodes[0], ":")
				sinkShards = append(sinkShards, place[first][0])
			}
		}
		base, ok := single.Services[name]
		if name == "sink2" {
			base, ok = single.Services["sink"]
		}
		if !ok {
			t.Errorf("%s: no counterpart in docker-compose.yml", name)
			continue
		}
		if want, got := withoutFlags(base.Command, "--clickhouse"), withoutFlags(s.Command, "--cluster", "--clickhouse"); !slices.Equal(want, got) {
			t.Errorf("%s: command %q is not docker-compose.yml's %q plus --cluster (and --clickhouse)", name, s.Command, base.Command)
		}
		if s.User != base.User || s.Image != base.Image || s.Build.Dockerfile != base.Build.Dockerfile || !maps.EqualFunc(s.Build.Args, base.Build.Args, func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }) {
			t.Errorf("%s: user, image or build differ from docker-compose.yml's %s", name, base.Name)
		}
	}
	sort.Ints(sinkShards)
	if !slices.Equal(sinkShards, []int{1, 2}) {
		t.Errorf("sinks write through shards %v, want one through each of 1 and 2", sinkShards)
	}
	for srv := range servers {
		if _, ok := c.Services["migrate"].DependsOn[srv]; !ok {
			t.Errorf("migrate (ON CLUSTER) does not wait for %s", srv)
		}
	}
}

// withoutFlags returns args without the given flags and their values.
func withoutFlags(args []string, flags ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if slices.Contains(flags, args[i]) {
			i++
			continue
		}
		if name, _, ok := strings.Cut(args[i], "="); ok && slices.Contains(flags, name) {
			continue
		}
		out = append(out, args[i])
	}
	return out
}
