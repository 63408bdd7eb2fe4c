package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/secret"
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
	Volumes     []string       `yaml:"volumes"`
	Secrets     []string       `yaml:"secrets"`
	User        string         `yaml:"user"`
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
		"processor1": true, "processor2": true, "sink": true, "trainer": true, "ingest": true, "prometheus": true, "grafana": true}
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
			if !strings.HasPrefix(s.Image, "apache/kafka:3.") && !strings.HasPrefix(s.Image, "clickhouse/clickhouse-server:26.8") &&
				!strings.HasPrefix(s.Image, "prom/prometheus:v3.") && !strings.HasPrefix(s.Image, "grafana/grafana:11.") {
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

// mounts returns a service's bind mounts: container path -> host path
// (relative to the repository root, without "./").
func mounts(s composeService) map[string]string {
	out := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], "./") {
			out[parts[1]] = strings.TrimPrefix(parts[0], "./")
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
	c := loadCompose(t)
	root := repoRoot(t)
	prom, graf := c.Services["prometheus"], c.Services["grafana"]
	if m := mounts(prom); m["/etc/prometheus"] != "infra/prometheus" {
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
	for name, s := range c.Services {
		if s.Build == nil || s.Restart == "no" || len(s.Profiles) > 0 {
			continue
		}
		for i, a := range s.Command {
			if a == "--listen" && i+1 < len(s.Command) {
				_, port, _ := strings.Cut(s.Command[i+1], ":")
				serving[name+":"+port] = name
			}
		}
	}
	for addr, name := range serving {
		if _, ok := scraped[addr]; !ok {
			t.Errorf("%s serves /metrics on %s, which prometheus.yml does not scrape", name, addr)
		}
	}
	for addr, job := range scraped {
		if _, ok := serving[addr]; !ok {
			t.Errorf("prometheus.yml job %s scrapes %s, which no harnessflow service serves", job, addr)
		}
	}

	m := mounts(graf)
	if m["/etc/grafana/provisioning"] != "infra/grafana/provisioning" || m["/var/lib/grafana/dashboards"] != "infra/grafana/dashboards" {
		t.Errorf("grafana mounts %v, want infra/grafana/provisioning and infra/grafana/dashboards", m)
	}
	for _, p := range m {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("grafana mounts %s: %v", p, err)
		}
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
	if !strings.Contains(fmt.Sprint(graf.Environment["GF_INSTALL_PLUGINS"]), "grafana-clickhouse-datasource") {
		t.Error("grafana does not install grafana-clickhouse-datasource")
	}
}

// composeSecretFiles returns the compose file's secrets: name -> file
// (relative to the repository root, without "./").
func composeSecretFiles(t *testing.T, c composeFile) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, v := range c.Secrets {
		m, _ := v.(map[string]any)
		f, _ := m["file"].(string)
		if !strings.HasPrefix(f, "./secrets/") {
			t.Errorf("secret %s: file %q, want one under ./secrets/ (generated, never committed)", name, f)
		}
		out[name] = strings.TrimPrefix(f, "./")
	}
	return out
}

var runSecret = regexp.MustCompile(`/run/secrets/([A-Za-z0-9_.-]+)`)

// TestComposeCredentials checks that compose runs with credentials: the
// ClickHouse `default` user gets its password from a secret, the brokers
// accept SASL only, every harnessflow service that reaches Kafka or
// ClickHouse passes the SASL and password flags (which parse) with secrets it
// mounts, and infra/scripts/compose-secrets.sh generates every secret file,
// with the modes harnessflow accepts and the users the brokers know.
func TestComposeCredentials(t *testing.T) {
	c := loadCompose(t)
	files := composeSecretFiles(t, c)
	// mounted reports the /run/secrets/NAME paths of text that svc does not
	// mount or that are not compose secrets.
	mounted := func(svc string, s composeService, text string) {
		t.Helper()
		for _, m := range runSecret.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(s.Secrets, m[1]) {
				t.Errorf("%s: uses /run/secrets/%s but does not mount secret %s", svc, m[1], m[1])
			}
			if _, ok := files[m[1]]; !ok {
				t.Errorf("%s: secret %s is not defined", svc, m[1])
			}
		}
	}

	ch := c.Services["clickhouse"]
	if ch.Environment["CLICKHOUSE_PASSWORD_FILE"] != "/run/secrets/clickhouse_password" || ch.Environment["CLICKHOUSE_SKIP_USER_SETUP"] != nil {
		t.Errorf("clickhouse: environment %v, want CLICKHOUSE_PASSWORD_FILE=/run/secrets/clickhouse_password and no passwordless default user", ch.Environment)
	}
	mounted("clickhouse", ch, fmt.Sprint(ch.Environment))
	if hc := fmt.Sprint(ch.Healthcheck["test"]); !strings.Contains(hc, "/run/secrets/clickhouse_password") {
		t.Errorf("clickhouse: health check %s logs in without the password", hc)
	}
	mounted("clickhouse", ch, fmt.Sprint(ch.Healthcheck["test"]))

	for _, n := range []string{"kafka1", "kafka2", "kafka3"} {
		s := c.Services[n]
		env := func(k string) string { v, _ := s.Environment[k].(string); return v }
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
		mounted(n, s, env("KAFKA_OPTS"))
		if hc := fmt.Sprint(s.Healthcheck["test"]); !strings.Contains(hc, "--command-config /run/secrets/") {
			t.Errorf("%s: health check %s has no SASL client config", n, hc)
		}
		mounted(n, s, fmt.Sprint(s.Healthcheck["test"]))
	}

	// Grafana's ClickHouse data source logs in with the same secret.
	ds, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "grafana", "provisioning", "datasources", "harnessflow.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ds), "password: $__file{/run/secrets/clickhouse_password}") {
		t.Error("grafana: the ClickHouse data source has no password from /run/secrets/clickhouse_password")
	}
	mounted("grafana", c.Services["grafana"], string(ds))
	if g := c.Services["grafana"]; !strings.Contains(g.User, "${HF_UID") {
		t.Errorf("grafana: user %q, want the secret files' owner", g.User)
	}

	for name, s := range c.Services {
		if s.Build == nil || len(s.Command) == 0 {
			continue
		}
		cmd, rest, err := newRoot().Find(s.Command)
		if err != nil {
			continue // TestComposeCommands reports it
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		mounted(name, s, strings.Join(s.Command, " "))
		if !strings.Contains(s.User, "${HF_UID") {
			t.Errorf("%s: user %q, want the secret files' owner (${HF_UID}:${HF_GID} from .env)", name, s.User)
		}
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
	if b, err := os.ReadFile(filepath.Join(dir, ".env")); err != nil || !strings.Contains(string(b), fmt.Sprintf("HF_UID=%d\n", os.Getuid())) {
		t.Errorf(".env: %q, %v; want HF_UID=%d", b, err, os.Getuid())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "secrets", ".gitignore")); err != nil || !strings.Contains(string(b), "*") {
		t.Errorf("secrets/.gitignore does not ignore the secrets: %q, %v", b, err)
	}
	gen()
	if p, _ := secret.FirstLine(filepath.Join(dir, files["kafka_password"]), "kafka_password"); p != pw["kafka_password"] {
		t.Error("a second run replaced kafka_password")
	}
}
