package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Secrets  map[string]any            `yaml:"secrets"`
}

type composeService struct {
	Image       string         `yaml:"image"`
	Build       *composeBuild  `yaml:"build"`
	Command     []string       `yaml:"command"`
	Ports       []string       `yaml:"ports"`
	Healthcheck map[string]any `yaml:"healthcheck"`
	Environment map[string]any `yaml:"environment"`
	Profiles    []string       `yaml:"profiles"`
	Restart     string         `yaml:"restart"`
	DependsOn   map[string]any `yaml:"depends_on"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// TestComposeCommands checks that every harnessflow service runs a real
// subcommand with flags that parse, and that the file has the promised shape.
func TestComposeCommands(t *testing.T) {
	c := loadCompose(t)
	want := map[string]bool{"kafka1": true, "kafka2": true, "kafka3": true, "clickhouse": true,
		"processor1": true, "processor2": true, "sink": true, "trainer": true, "ingest": true}
	for name := range want {
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
			if !strings.HasPrefix(p, "127.0.0.1:") || strings.Count(p, ":") != 2 {
				t.Errorf("%s: port %q is not published on loopback as 127.0.0.1:HOST:CONTAINER", name, p)
			}
		}
		long := s.Restart != "no" && len(s.Profiles) == 0
		if long && s.Healthcheck == nil {
			t.Errorf("%s: long-running service without a health check", name)
		}
		if s.Build == nil {
			if !strings.HasPrefix(s.Image, "apache/kafka:3.") && !strings.HasPrefix(s.Image, "clickhouse/clickhouse-server:26.8") {
				t.Errorf("%s: unexpected image %q", name, s.Image)
			}
			continue
		}
		if s.Build.Dockerfile != "infra/Dockerfile" || s.Build.Context != "." {
			t.Errorf("%s: build %+v, want context . and infra/Dockerfile", name, s.Build)
		}
		if len(s.Command) == 0 {
			t.Errorf("%s: no command", name)
			continue
		}
		root := newRoot()
		cmd, rest, err := root.Find(s.Command)
		if err != nil || cmd == root || !cmd.Runnable() {
			t.Errorf("%s: %q is not a harnessflow subcommand (%v)", name, s.Command, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: %q: %v", name, s.Command, err)
			continue
		}
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			t.Errorf("%s: %q: %v", name, s.Command, err)
		}
		subcommands[cmd.Name()]++
		if long {
			if s.DependsOn == nil {
				t.Errorf("%s: no depends_on", name)
			}
		}
	}
	if subcommands["process"] != 2 || subcommands["sink"] != 1 || subcommands["train"] != 1 || subcommands["ingest"] != 1 {
		t.Errorf("harnessflow services: %v (want two processors, a sink, a trainer, ingest)", subcommands)
	}
	// KRaft: three combined broker/controller nodes in one quorum.
	for _, n := range []string{"kafka1", "kafka2", "kafka3"} {
		env := c.Services[n].Environment
		if env["KAFKA_PROCESS_ROLES"] != "broker,controller" || !strings.Contains(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].(string), "3@kafka3:9093") {
			t.Errorf("%s: not a KRaft quorum member: %v", n, env)
		}
	}
	if _, ok := c.Secrets["ingest_tokens"]; !ok {
		t.Error("ingest's token file is not a secret")
	}
}

func TestDockerfileBuildsTheBinary(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"go build", "./cmd/harnessflow", "ENTRYPOINT [\"/usr/local/bin/harnessflow\"]", "curl", "git"} {
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
