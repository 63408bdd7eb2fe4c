// Package stack runs every harnessflow component in one process: the embedded
// broker (or --brokers), a managed local ClickHouse (or --clickhouse),
// migrations, processors, the ClickHouse sink, the trainer and the ingest
// gateway. It is `harnessflow up`. Everything it keeps lives under DataDir, so a
// second run on the same DataDir resumes with all data intact.
package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/schemas"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/internal/secret"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/sinks/chsink"
	"github.com/harnessflow/harnessflow/trainer"
	"github.com/harnessflow/harnessflow/trainer/eval"
)

// Config configures the stack. Zero fields take the documented defaults.
type Config struct {
	// DataDir holds the broker's log, ClickHouse's data, the trainer's
	// checkpoints, the ingest tokens and endpoints.json. Default: ./.harnessflow.
	DataDir string
	// Brokers are external Kafka brokers; empty runs the embedded broker.
	Brokers []string
	// BrokerListen is the embedded broker's address. Default: 127.0.0.1:9092,
	// or the port recorded by an earlier run; when that port is taken, a
	// free one.
	BrokerListen string
	// ClickHouse is an external server's native host:port; empty starts a
	// managed clickhouse-server under DataDir/clickhouse.
	ClickHouse string
	// Database is the ClickHouse database. Default: harnessflow.
	Database string
	// IngestListen is the ingest gateway's address. Default: 127.0.0.1:8080
	// (a free port when taken).
	IngestListen string
	// TrainerListen is the trainer's /v1/score address. Default: 127.0.0.1:8090
	// (a free port when taken).
	TrainerListen string
	// MetricsListen serves /metrics, /healthz and /readyz for the
	// processors, the sink and the gateway (/readyz: 503 until every
	// component started, and while the brokers or ClickHouse do not answer).
	// Default: 127.0.0.1:9464 (a free port when taken).
	MetricsListen string
	// Device is the trainer's compute device (auto, cpu, cuda). Default: auto.
	Device string
	// Project is the project of the generated ingest token and of the
	// trainer's critic (trained on its samples alone). Default: default.
	Project string
	// SchemaRegistry is a Confluent Schema Registry's base URL, through
	// which the processors and the sink decode Confluent-framed raw messages
	// (processors.Config.SchemaRegistry). Default: "" (none).
	SchemaRegistry string
}

// DefaultConfig is the configuration Run fills in for the fields left zero:
// what `harnessflow up` runs without flags.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = ".harnessflow"
	}
	if c.Database == "" {
		c.Database = chddl.DefaultDatabase
	}
	if c.BrokerListen == "" {
		c.BrokerListen = kafkax.DefaultBrokers
	}
	if c.IngestListen == "" {
		c.IngestListen = ingest.DefaultConfig().Listen
	}
	if c.TrainerListen == "" {
		c.TrainerListen = trainer.DefaultConfig().Listen
	}
	if c.MetricsListen == "" {
		c.MetricsListen = obs.DefaultListen
	}
	if c.Device == "" {
		c.Device = trainer.DefaultConfig().Device
	}
	if c.Project == "" {
		c.Project = schemas.DefaultProject
	}
}

// Endpoints are where the running stack answers; written to
// DataDir/endpoints.json for scripts.
type Endpoints struct {
	Brokers    string `json:"brokers"`
	ClickHouse string `json:"clickhouse"`
	Database   string `json:"database"`
	IngestURL  string `json:"ingest_url"`
	// OTLPURL is the gateway's OTLP/HTTP traces endpoint (docs/otlp.md),
	// beside IngestURL; the same token.
	OTLPURL     string `json:"otlp_url"`
	IngestToken string `json:"ingest_token"`
	TrainerURL  string `json:"trainer_url"`
	// ScoreToken is the bearer token the trainer's /v1/score and
	// /v1/rewards require (score-token in the data dir, made on first run).
	ScoreToken string `json:"score_token"`
	MetricsURL string `json:"metrics_url"`
	DataDir    string `json:"data_dir"`
}

// Stack is a running set of components. Use New, then Run.
type Stack struct {
	cfg   Config
	log   zerolog.Logger
	ready chan struct{}

	// recomputeEvery is the sink's chsink.Config.RecomputeEvery (zero: its
	// default); tests slow the summaries down with it.
	recomputeEvery time.Duration

	mu  sync.Mutex
	ep  Endpoints
	ch  driver.Conn
	err error
}

// Option is a test seam.
type Option func(*Stack)

// WithLogger sets the logger. Default: JSON on stderr.
func WithLogger(l zerolog.Logger) Option { return func(s *Stack) { s.log = l } }

// New validates cfg and returns a stack that Run starts.
func New(cfg Config, opts ...Option) (*Stack, error) {
	cfg.setDefaults()
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir %q: %w", cfg.DataDir, err)
	}
	cfg.DataDir = abs
	s := &Stack{cfg: cfg, log: zerolog.New(os.Stderr).With().Timestamp().Str("component", "up").Logger(), ready: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Ready is closed once every component has started and Endpoints is valid.
func (s *Stack) Ready() <-chan struct{} { return s.ready }

// Endpoints returns where the stack answers (valid after Ready).
func (s *Stack) Endpoints() Endpoints {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ep
}

// ClickHouseConn returns a connection to the stack's database (valid after Ready).
func (s *Stack) ClickHouseConn() driver.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// Run starts everything, blocks until ctx ends or a component fails, then stops
// the components in order (producers of data first, servers last), each
// draining and flushing.
func (s *Stack) Run(ctx context.Context) error {
	cfg := s.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	prev := readEndpoints(filepath.Join(cfg.DataDir, "endpoints.json"))
	var ep Endpoints
	ep.DataDir = cfg.DataDir
	ep.Database = cfg.Database

	brokers, topicOpts, stopBroker, err := s.startKafka(prev)
	if err != nil {
		return err
	}
	defer stopBroker()
	ep.Brokers = strings.Join(brokers, ",")
	if err := kafkax.EnsureAllTopics(ctx, brokers, topicOpts...); err != nil {
		return err
	}

	chAddr, stopClickHouse, err := s.startClickHouse(ctx, prev)
	if err != nil {
		return err
	}
	defer stopClickHouse()
	ep.ClickHouse = chAddr
	if err := s.migrate(ctx, chAddr); err != nil {
		return err
	}
	dbConn, err := chx.Open(ctx, chAddr, cfg.Database)
	if err != nil {
		return err
	}
	defer dbConn.Close()

	// Ingest token: generated once, kept in the data dir.
	tokensFile := filepath.Join(cfg.DataDir, "ingest-tokens")
	token, err := ensureToken(tokensFile, cfg.Project)
	if err != nil {
		return err
	}
	ep.IngestToken = token
	// Score token: /v1/score and /v1/rewards are never open, even on
	// loopback; generated once, kept in the data dir.
	scoreFile := filepath.Join(cfg.DataDir, "score-token")
	if ep.ScoreToken, err = ensureScoreToken(scoreFile); err != nil {
		return err
	}

	reg := obs.NewRegistry()
	// The HTTP endpoints are bound here and their listeners handed to the
	// components, so the previous run's ports cannot be lost between a check
	// and the bind (to an outgoing connection's source port, say).
	var lns []net.Listener
	handed := false
	defer func() {
		if !handed {
			for _, ln := range lns {
				ln.Close()
			}
		}
	}()
	for _, a := range []struct{ want, prev string }{
		{cfg.IngestListen, hostPort(prev.IngestURL)}, {cfg.TrainerListen, hostPort(prev.TrainerURL)}, {cfg.MetricsListen, hostPort(prev.MetricsURL)},
	} {
		ln, err := bindAddr(a.want, a.prev)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}
	ingestLn, trainerLn, metricsLn := lns[0], lns[1], lns[2]

	proc, err := processors.New(processors.Config{Brokers: brokers, SchemaRegistry: cfg.SchemaRegistry}, processors.WithLogger(s.sub("processors")), processors.WithRegisterer(reg))
	if err != nil {
		return err
	}
	sink, err := chsink.New(chsink.Config{Brokers: brokers, ClickHouse: chAddr, Database: cfg.Database, SkipMigrate: true, SchemaRegistry: cfg.SchemaRegistry, RecomputeEvery: s.recomputeEvery}, chsink.WithLogger(s.sub("sink")), chsink.WithRegisterer(reg))
	if err != nil {
		return err
	}
	tcfg := trainer.Config{
		Brokers: brokers, ClickHouse: chAddr, Database: cfg.Database,
		CheckpointDir: filepath.Join(cfg.DataDir, "trainer"), Device: cfg.Device, Listen: trainerLn.Addr().String(),
		ScoreTokenFile: scoreFile,
		// The critic is up's project's: trained on its samples alone and
		// serving it alone (its score token is the project's). up runs one
		// trainer, so it keeps the group and name hf-trainer. A data dir
		// of an earlier release holds a checkpoint of all projects: up
		// goes on from it (with a warning) rather than refusing to start.
		Project: cfg.Project, Group: "hf-trainer", AdoptSharedCheckpoint: true,
	}
	obs.WarnUnauthenticated(s.sub("trainer"), "trainer", trainerLn.Addr().String(), tcfg.ScoreToken != "" || tcfg.ScoreTokenFile != "",
		"anyone who reaches it scores candidates and rewards with the critic (POST /v1/score, /v1/rewards); give --trainer-listen 127.0.0.1:PORT")
	tr, err := trainer.New(tcfg, trainer.WithLogger(s.sub("trainer")), trainer.WithRegisterer(reg), trainer.WithListener(trainerLn),
		// Every checkpoint is evaluated on the held-out groups against
		// the baselines (critic_evals, the warming flag), as train does.
		trainer.WithCheckpointEvaluator(eval.CheckpointEvaluator(eval.Config{})))
	if err != nil {
		return err
	}
	gw, err := ingest.New(ingest.Config{Brokers: brokers, Listen: ingestLn.Addr().String(), TokensFile: tokensFile}, ingest.WithLogger(s.sub("ingest")), ingest.WithRegisterer(reg), ingest.WithListener(ingestLn))
	if err != nil {
		return err
	}

	// Servers of data (ClickHouse, broker) outlive the components: the
	// components run under their own context, cancelled first.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(cctx)
	handed = true
	ep.MetricsURL = "http://" + metricsLn.Addr().String() + "/metrics"
	g.Go(func() error {
		return obs.ServeListener(gctx, metricsLn, obs.Mux(reg, nil, obs.WithReady("up", s.ready),
			obs.WithCheck("kafka", func(ctx context.Context) error { return kafkax.Ping(ctx, brokers) }),
			obs.WithCheck("clickhouse", dbConn.Ping)))
	})
	g.Go(func() error { return named("processors", proc.Run(gctx)) })
	g.Go(func() error { return named("sink", sink.Run(gctx)) })
	g.Go(func() error { return named("trainer", tr.Run(gctx)) })
	g.Go(func() error { return named("ingest", gw.Run(gctx)) })

	waitErr := waitUp(gctx, g, &ep, tr, gw)
	if waitErr != nil {
		return waitErr
	}
	s.mu.Lock()
	s.ep = ep
	s.ch = dbConn
	s.mu.Unlock()
	if err := writeEndpoints(filepath.Join(cfg.DataDir, "endpoints.json"), ep); err != nil {
		s.log.Warn().Err(err).Msg("write endpoints.json")
	}
	close(s.ready)
	s.log.Info().Str("brokers", ep.Brokers).Str("clickhouse", ep.ClickHouse).Str("ingest_url", ep.IngestURL).
		Str("otlp_url", ep.OTLPURL).Str("trainer_url", ep.TrainerURL).Str("metrics_url", ep.MetricsURL).Str("data_dir", ep.DataDir).Msg("harnessflow is up")

	err = g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

// startKafka starts the embedded broker unless the configuration names
// brokers, and returns the brokers, how to create topics on them (on the
// embedded one-node broker: one replica each; on named brokers: the declared
// factors or --kafka-replication-factor) and what stops the broker.
func (s *Stack) startKafka(prev Endpoints) ([]string, []kafkax.TopicOption, func(), error) {
	if len(s.cfg.Brokers) > 0 {
		return s.cfg.Brokers, nil, func() {}, nil
	}
	listen := pickAddr(s.cfg.BrokerListen, prev.Brokers)
	b, err := broker.Start(broker.Config{Listen: listen, DataDir: filepath.Join(s.cfg.DataDir, "kafka")})
	if err != nil {
		return nil, nil, nil, err
	}
	obs.WarnUnauthenticated(s.log, "embedded broker", b.Addr(), false, // up's broker has no SASL
		"any client that reaches it reads and writes every topic of every project, past every project check of the gateway; "+
			"give --broker-listen 127.0.0.1:PORT, or run `harnessflow broker --sasl-users` and give it with --brokers")
	return []string{b.Addr()}, []kafkax.TopicOption{b.TopicOption()}, func() {
		s.log.Info().Msg("stopping the embedded broker")
		b.Close()
	}, nil
}

// startClickHouse starts the managed ClickHouse server unless the
// configuration names one (on the previous run's port when it is free), and
// returns its native address and what stops it.
func (s *Stack) startClickHouse(ctx context.Context, prev Endpoints) (string, func(), error) {
	if s.cfg.ClickHouse != "" {
		return s.cfg.ClickHouse, func() {}, nil
	}
	chc := chserver.Config{DataDir: filepath.Join(s.cfg.DataDir, "clickhouse")}
	if _, port, err := net.SplitHostPort(prev.ClickHouse); err == nil && portFree(prev.ClickHouse) {
		fmt.Sscan(port, &chc.TCPPort)
	}
	srv, err := chserver.Start(ctx, chc)
	if err != nil {
		return "", nil, err
	}
	return srv.Addr(), func() {
		s.log.Info().Msg("stopping the managed ClickHouse")
		if err := srv.Stop(); err != nil {
			s.log.Warn().Err(err).Msg("ClickHouse stop")
		}
	}, nil
}

// migrate applies the schema's migrations to the stack's database.
func (s *Stack) migrate(ctx context.Context, chAddr string) error {
	conn, err := chx.Open(ctx, chAddr, "default")
	if err != nil {
		return err
	}
	defer conn.Close()
	res, err := chddl.Migrate(ctx, chx.Session(conn), s.cfg.Database)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	res.Log(s.log, s.cfg.Database)
	return nil
}

// waitUp waits until the metrics endpoint, the trainer and the ingest
// gateway serve, filling in their URLs, or returns the group's error when a
// component fails first.
func waitUp(gctx context.Context, g *errgroup.Group, ep *Endpoints, tr *trainer.Trainer, gw *ingest.Server) error {
	select {
	case <-tr.Ready():
		ep.TrainerURL = "http://" + tr.Addr() + "/v1/score"
	case <-gctx.Done():
		return g.Wait()
	}
	select {
	case <-gw.Ready():
		ep.IngestURL = "http://" + gw.Addr() + "/v1/events"
		ep.OTLPURL = "http://" + gw.Addr() + "/v1/traces"
	case <-gctx.Done():
		return g.Wait()
	}
	return nil
}

func (s *Stack) sub(component string) zerolog.Logger {
	return s.log.With().Str("component", component).Logger()
}

// PrintEndpoints writes the endpoints for a person to read.
func PrintEndpoints(w io.Writer, ep Endpoints) {
	fmt.Fprintf(w, "harnessflow is up\n")
	fmt.Fprintf(w, "  kafka brokers      %s\n", ep.Brokers)
	fmt.Fprintf(w, "  clickhouse native  %s (database %s)\n", ep.ClickHouse, ep.Database)
	fmt.Fprintf(w, "  ingest             %s\n", ep.IngestURL)
	fmt.Fprintf(w, "  otlp traces        %s\n", ep.OTLPURL)
	fmt.Fprintf(w, "  ingest token       %s\n", ep.IngestToken)
	fmt.Fprintf(w, "  trainer score      %s\n", ep.TrainerURL)
	fmt.Fprintf(w, "  score token        %s\n", ep.ScoreToken)
	fmt.Fprintf(w, "  metrics            %s\n", ep.MetricsURL)
	fmt.Fprintf(w, "  data               %s (endpoints.json for scripts)\n", ep.DataDir)
}

func named(component string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%s: %w", component, err)
}

// pickAddr returns want when it can be bound, else prev when that can, else a
// free port on want's host.
func pickAddr(want, prev string) string {
	if prev != "" && portFree(prev) {
		return prev
	}
	if portFree(want) {
		return want
	}
	host, _, err := net.SplitHostPort(want)
	if err != nil || host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, "0")
}

// bindAddr binds prev when it can (the previous run's port, so that URLs
// stay the same across restarts), else want, else a free port on want's
// host.
func bindAddr(want, prev string) (net.Listener, error) {
	for _, a := range []string{prev, want} {
		if a == "" {
			continue
		}
		if ln, err := net.Listen("tcp", a); err == nil {
			return ln, nil
		}
	}
	host, _, err := net.SplitHostPort(want)
	if err != nil || host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("bind an HTTP port on %s: %w", host, err)
	}
	return ln, nil
}

func portFree(addr string) bool {
	if addr == "" {
		return false
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

func hostPort(u string) string {
	u = strings.TrimPrefix(u, "http://")
	if i := strings.IndexByte(u, '/'); i >= 0 {
		u = u[:i]
	}
	return u
}

func readEndpoints(path string) Endpoints {
	var ep Endpoints
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &ep)
	}
	return ep
}

func writeEndpoints(path string, ep Endpoints) error {
	b, err := json.MarshalIndent(ep, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ensureToken returns the first token of the tokens file, creating the file
// with a new random token for project when it does not exist.
func ensureToken(path, project string) (string, error) {
	if _, err := os.Stat(path); err == nil {
		toks, err := ingest.LoadTokens(path)
		if err != nil {
			return "", err
		}
		for tok, p := range toks {
			if p == project {
				return tok, nil
			}
		}
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok := "hf_" + hex.EncodeToString(buf)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", fmt.Errorf("write ingest tokens: %w", err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "# TOKEN PROJECT (generated by harnessflow up)\n%s %s\n", tok, project); err != nil {
		return "", err
	}
	return tok, nil
}

// ensureScoreToken returns the first line of the score token file, creating
// the file (mode 600) with a new random token when it does not exist.
func ensureScoreToken(path string) (string, error) {
	if _, err := os.Stat(path); err == nil {
		return secret.FirstLine(path, "score token file")
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok := "hfs_" + hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the score token: %w", err)
	}
	return tok, nil
}

// pollEvery paces the demo's progress checks.
const pollEvery = 500 * time.Millisecond
