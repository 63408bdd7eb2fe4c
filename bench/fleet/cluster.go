package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chserver"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
)

// ClusterConfig lays out a co-located harnessflow: the embedded broker and a
// managed clickhouse-server in the driver's process tree, and processors,
// sink and trainer as child processes of Bin.
type ClusterConfig struct {
	// Dir holds the broker's log, ClickHouse's data, the trainer's
	// checkpoints and the children's logs. Required.
	Dir string
	// Bin is the harnessflow executable the children run. Required.
	Bin string
	// Database is the ClickHouse database. Default: harnessflow.
	Database string
	// BrokerOpts are extra kfake options (fault injection).
	BrokerOpts []kfake.Opt
	// ProcessArgs, SinkArgs and TrainArgs are appended to each child's
	// arguments (the cluster sets brokers, ClickHouse, database, listen
	// addresses and the checkpoint dir).
	ProcessArgs, SinkArgs, TrainArgs []string
	// Env is added to every child's environment (e.g. HF_LOG_LEVEL=warn).
	Env []string
}

// Cluster is a running co-located harnessflow. Start the children with
// StartAll (or one by one); Close stops everything.
type Cluster struct {
	cfg ClusterConfig

	mu     sync.Mutex
	broker *broker.Broker
	addr   string
	ch     *chserver.Server
	conn   driver.Conn

	Processors, Sink, Trainer *Proc
}

// StartCluster starts the broker (topics created), ClickHouse (migrated) and
// prepares the three children without starting them.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" || cfg.Bin == "" {
		return nil, errors.New("fleet: ClusterConfig needs Dir and Bin")
	}
	if cfg.Database == "" {
		cfg.Database = "harnessflow"
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(cfg.Dir, "kafka"), Opts: cfg.BrokerOpts})
	if err != nil {
		return nil, err
	}
	c.broker, c.addr = b, b.Addr()
	if err := kafkax.EnsureAllTopics(ctx, []string{c.addr}, b.TopicOption()); err != nil {
		c.Close()
		return nil, err
	}
	srv, err := chserver.Start(ctx, chserver.Config{DataDir: filepath.Join(cfg.Dir, "clickhouse"), StopTimeout: 20 * time.Second})
	if err != nil {
		c.Close()
		return nil, err
	}
	c.ch = srv
	boot, err := chx.Open(ctx, srv.Addr(), "default")
	if err != nil {
		c.Close()
		return nil, err
	}
	_, err = chddl.Migrate(ctx, chx.Session(boot), cfg.Database)
	boot.Close()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if c.conn, err = chx.Open(ctx, srv.Addr(), cfg.Database); err != nil {
		c.Close()
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		c.Close()
		return nil, err
	}
	logs := filepath.Join(cfg.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		c.Close()
		return nil, err
	}
	child := func(name string, port int, args, extra []string) *Proc {
		listen := "127.0.0.1:" + strconv.Itoa(port)
		return &Proc{Name: name, Bin: cfg.Bin, Args: append(append(args, "--listen", listen), extra...), Env: cfg.Env,
			LogPath: filepath.Join(logs, name+".log"), MetricsURL: "http://" + listen + "/metrics"}
	}
	c.Processors = child("processors", ports[2], []string{"process", "--brokers", c.addr}, cfg.ProcessArgs)
	c.Sink = child("sink", ports[0], []string{"sink", "--brokers", c.addr, "--clickhouse", srv.Addr(), "--database", cfg.Database}, cfg.SinkArgs)
	c.Trainer = child("trainer", ports[1], []string{"train", "--brokers", c.addr, "--clickhouse", srv.Addr(), "--database", cfg.Database,
		"--checkpoint-dir", filepath.Join(cfg.Dir, "trainer")}, cfg.TrainArgs)
	return c, nil
}

// Children are the three component processes.
func (c *Cluster) Children() []*Proc { return []*Proc{c.Processors, c.Sink, c.Trainer} }

// StartAll starts every child that is not running.
func (c *Cluster) StartAll() error {
	for _, p := range c.Children() {
		if p.Running() {
			continue
		}
		if err := p.Start(); err != nil {
			return err
		}
	}
	return nil
}

// WaitMetrics waits until every child answers its /metrics (its listener is
// up: a bench that measures a child before then reads nothing from it, as
// a trainer still starting beside a CPU hog showed), or ctx ends.
func (c *Cluster) WaitMetrics(ctx context.Context) error {
	client := &http.Client{Timeout: liveScrapeTimeout}
	for _, p := range c.Children() {
		for {
			if _, err := liveHeapBytes(client, p.MetricsURL); err == nil {
				break
			} else if ctx.Err() != nil {
				return fmt.Errorf("%s never answered %s: %w", p.Name, p.MetricsURL, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// Brokers is the broker address list for clients.
func (c *Cluster) Brokers() []string { return []string{c.addr} }

// Broker is the running embedded broker (nil while restarting).
func (c *Cluster) Broker() *broker.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broker
}

// ClickHouseAddr is ClickHouse's native host:port (stable across restarts).
func (c *Cluster) ClickHouseAddr() string { return c.ch.Addr() }

// ClickHousePid returns the running server's process id.
func (c *Cluster) ClickHousePid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch.Pid()
}

// Database is the ClickHouse database.
func (c *Cluster) Database() string { return c.cfg.Database }

// Conn is a connection to the database. It fails while ClickHouse is stopped
// and works again after StartClickHouse.
func (c *Cluster) Conn() driver.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

// RestartBroker closes the embedded broker (flushing its data dir) and
// starts a new one on the same address and data dir, with opts in place of
// ClusterConfig.BrokerOpts when given. Clients reconnect on their own.
func (c *Cluster) RestartBroker(opts ...kfake.Opt) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broker != nil {
		c.broker.Close()
		c.broker = nil
	}
	if len(opts) == 0 {
		opts = c.cfg.BrokerOpts
	}
	var err error
	for i := 0; i < 50; i++ { // the port may linger for a moment
		var b *broker.Broker
		b, err = broker.Start(broker.Config{Listen: c.addr, DataDir: filepath.Join(c.cfg.Dir, "kafka"), Opts: opts})
		if err == nil {
			c.broker = b
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart broker on %s: %w", c.addr, err)
}

// StopClickHouse stops the managed server (its clients see connection
// errors until StartClickHouse).
func (c *Cluster) StopClickHouse() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch.Stop()
}

// StartClickHouse starts the server again on its data dir and ports.
func (c *Cluster) StartClickHouse(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	srv, err := chserver.Start(ctx, c.ch.Config())
	if err != nil {
		return err
	}
	c.ch = srv
	if c.conn != nil {
		c.conn.Close()
	}
	c.conn, err = chx.Open(ctx, srv.Addr(), c.cfg.Database)
	return err
}

// Close stops the children (SIGTERM, drain), then ClickHouse and the broker.
// It returns the first child that did not stop cleanly.
func (c *Cluster) Close() error {
	var first error
	for _, p := range []*Proc{c.Processors, c.Sink, c.Trainer} {
		if p == nil {
			continue
		}
		if err := p.Close(60 * time.Second); err != nil && first == nil {
			first = err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	if c.ch != nil {
		_ = c.ch.Stop()
	}
	if c.broker != nil {
		c.broker.Close()
		c.broker = nil
	}
	return first
}

func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
