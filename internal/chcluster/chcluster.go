// Package chcluster runs a ClickHouse cluster on loopback: one ZooKeeper
// (Debian's zookeeper package, run with Java) and shards × replicas
// clickhouse-server processes (internal/chserver), each with its own data
// dir and ports, configured as one cluster (remote_servers with
// internal_replication, macros {shard} and {replica}, a distributed DDL
// queue). The tests of the cluster path use it; so can an operator who wants
// to try `migrate --cluster` on one machine.
//
// Nodes can be killed and restarted on the same ports and data, as a
// replica that crashes and comes back would be.
package chcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harnessflow/harnessflow/internal/chserver"
)

// DefaultName is the cluster's name in remote_servers unless told otherwise.
const DefaultName = "hf"

// Config configures a cluster.
type Config struct {
	// Dir holds ZooKeeper's data and one folder per node. Required.
	Dir string
	// Name is the cluster's name (remote_servers). Default: DefaultName.
	Name string
	// Shards and Replicas give the shape. Default: 2 × 2.
	Shards, Replicas int
	// Password is the password of each server's `default` user (also used
	// by the servers to reach each other). Default: none.
	Password string
	// Java is the java executable. Default: java on PATH.
	Java string
	// ZooKeeperClassPath is the class path of ZooKeeper's server.
	// Default: Debian's, /usr/share/java/zookeeper.jar and its directory.
	ZooKeeperClassPath string
	// MaxServerMemory caps each server (chserver.Config). Default: 1 GiB.
	MaxServerMemory int64
}

// Node is one clickhouse-server of the cluster.
type Node struct {
	// Shard and Replica are 1-based, as in the macros ("01", "r1").
	Shard, Replica int
	cfg            chserver.Config

	mu  sync.Mutex
	srv *chserver.Server
}

// Addr is the node's native-protocol address.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.cfg.TCPPort)) }

// HTTPAddr is the node's HTTP address.
func (n *Node) HTTPAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.cfg.HTTPPort)) }

// Name is "s<shard>r<replica>".
func (n *Node) Name() string { return fmt.Sprintf("s%dr%d", n.Shard, n.Replica) }

// DataDir is the node's folder.
func (n *Node) DataDir() string { return n.cfg.DataDir }

// Pid is the node's server process id (0 when it is not running).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return 0
	}
	return n.srv.Pid()
}

// Running reports whether the node's server process runs.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return false
	}
	select {
	case <-n.srv.Done():
		return false
	default:
		return true
	}
}

// Cluster is a running ZooKeeper and its ClickHouse nodes.
type Cluster struct {
	cfg    Config
	zkPort int
	zk     *exec.Cmd
	zkDone chan struct{}
	nodes  []*Node
}

// Nodes returns every node, shard by shard.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Name is the cluster's name.
func (c *Cluster) Name() string { return c.cfg.Name }

// Node returns the node of shard s, replica r (1-based).
func (c *Cluster) Node(s, r int) *Node { return c.nodes[(s-1)*c.cfg.Replicas+(r-1)] }

// ZooKeeperAddr is ZooKeeper's client address.
func (c *Cluster) ZooKeeperAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.zkPort))
}

// ErrNoZooKeeper says that ZooKeeper's server is not installed.
var ErrNoZooKeeper = errors.New("chcluster: ZooKeeper is not installed (Debian: apt-get install zookeeper; `make test` installs it through infra/scripts/ensure-deps.sh --test)")

const debianZooKeeperJar = "/usr/share/java/zookeeper.jar"

// Available reports whether a cluster can start here: java, ZooKeeper's
// jar and a clickhouse-server binary.
func Available() error {
	if _, err := exec.LookPath("java"); err != nil {
		return fmt.Errorf("chcluster: java not found (apt-get install default-jre-headless): %w", err)
	}
	if _, err := os.Stat(debianZooKeeperJar); err != nil {
		return ErrNoZooKeeper
	}
	_, err := chserver.FindBinary("")
	return err
}

// Start starts ZooKeeper and every node, and waits until each answers and
// sees ZooKeeper. On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("chcluster: Config.Dir is required")
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Shards == 0 {
		cfg.Shards = 2
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 2
	}
	if cfg.Shards < 1 || cfg.Replicas < 1 {
		return nil, fmt.Errorf("chcluster: %d shards × %d replicas", cfg.Shards, cfg.Replicas)
	}
	if cfg.Java == "" {
		cfg.Java = "java"
	}
	if cfg.ZooKeeperClassPath == "" {
		if _, err := os.Stat(debianZooKeeperJar); err != nil {
			return nil, ErrNoZooKeeper
		}
		cfg.ZooKeeperClassPath = debianZooKeeperJar + ":" + filepath.Dir(debianZooKeeperJar) + "/*"
	}
	if cfg.MaxServerMemory == 0 {
		cfg.MaxServerMemory = 1 << 30
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	n := cfg.Shards * cfg.Replicas
	ports, err := freePorts(1 + 3*n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, zkPort: ports[0]}
	if err := c.startZooKeeper(ctx); err != nil {
		return nil, err
	}
	for s := 1; s <= cfg.Shards; s++ {
		for r := 1; r <= cfg.Replicas; r++ {
			i := len(c.nodes)
			c.nodes = append(c.nodes, &Node{Shard: s, Replica: r, cfg: chserver.Config{
				DataDir:         filepath.Join(dir, fmt.Sprintf("s%dr%d", s, r)),
				TCPPort:         ports[1+3*i],
				HTTPPort:        ports[2+3*i],
				Password:        cfg.Password,
				MaxServerMemory: cfg.MaxServerMemory,
				StartTimeout:    90 * time.Second,
				StopTimeout:     20 * time.Second,
			}})
		}
	}
	for i, nd := range c.nodes {
		nd.cfg.ExtraConfig = c.nodeConfig(nd, ports[3+3*i])
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, nd := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.StartNode(ctx, nd)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartNode starts nd (again) on its ports and data dir.
func (c *Cluster) StartNode(ctx context.Context, nd *Node) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	srv, err := chserver.Start(ctx, nd.cfg)
	if err != nil {
		return fmt.Errorf("chcluster: node %s: %w", nd.Name(), err)
	}
	nd.srv = srv
	return nil
}

// KillNode stops nd with SIGKILL, as a crash would.
func (c *Cluster) KillNode(nd *Node) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.srv != nil {
		nd.srv.Kill()
		nd.srv = nil
	}
}

// Close stops every node and ZooKeeper.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.mu.Lock()
			defer nd.mu.Unlock()
			if nd.srv != nil {
				_ = nd.srv.Stop()
				nd.srv = nil
			}
		}()
	}
	wg.Wait()
	if c.zk != nil && c.zk.Process != nil {
		_ = syscall.Kill(-c.zk.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.zkDone:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-c.zk.Process.Pid, syscall.SIGKILL)
			<-c.zkDone
		}
	}
}

func (c *Cluster) startZooKeeper(ctx context.Context) error {
	zdir := filepath.Join(c.cfg.Dir, "zookeeper")
	if err := os.MkdirAll(zdir, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(zdir, "zookeeper.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(c.cfg.Java, "-Xmx256m", "-XX:+UseSerialGC",
		"-Dzookeeper.admin.enableServer=false", "-Dzookeeper.4lw.commands.whitelist=ruok,srvr",
		"-cp", c.cfg.ZooKeeperClassPath, "org.apache.zookeeper.server.ZooKeeperServerMain",
		strconv.Itoa(c.zkPort), filepath.Join(zdir, "data"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chcluster: start ZooKeeper: %w", err)
	}
	c.zk, c.zkDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(c.zkDone) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ok := ruok(c.ZooKeeperAddr()); ok {
			return nil
		}
		select {
		case <-c.zkDone:
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("chcluster: ZooKeeper exited at start:\n%s", tail(string(b), 20))
		case <-ctx.Done():
			c.Close()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling interval while the JVM starts
		}
		if time.Now().After(deadline) {
			c.Close()
			return errors.New("chcluster: ZooKeeper did not answer within 60 s (see " + logf.Name() + ")")
		}
	}
}

// ruok asks ZooKeeper whether it serves ("imok").
func ruok(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("ruok")); err != nil {
		return false
	}
	b := make([]byte, 4)
	n, _ := conn.Read(b)
	return string(b[:n]) == "imok"
}

// nodeConfig is nd's part of config.xml: its interserver port, the
// cluster's shards and replicas, ZooKeeper, its macros, the DDL queue and
// the crash tolerance of replicated tables.
func (c *Cluster) nodeConfig(nd *Node, interserverPort int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    <interserver_http_host>127.0.0.1</interserver_http_host>\n")
	fmt.Fprintf(&b, "    <interserver_http_port>%d</interserver_http_port>\n", interserverPort)
	fmt.Fprintf(&b, "    <remote_servers>\n        <%s>\n", c.cfg.Name)
	for s := 1; s <= c.cfg.Shards; s++ {
		b.WriteString("            <shard>\n                <internal_replication>true</internal_replication>\n")
		for r := 1; r <= c.cfg.Replicas; r++ {
			o := c.Node(s, r)
			fmt.Fprintf(&b, "                <replica><host>127.0.0.1</host><port>%d</port>", o.cfg.TCPPort)
			if c.cfg.Password != "" {
				fmt.Fprintf(&b, "<user>default</user><password>%s</password>", xmlText(c.cfg.Password))
			}
			b.WriteString("</replica>\n")
		}
		b.WriteString("            </shard>\n")
	}
	fmt.Fprintf(&b, "        </%s>\n    </remote_servers>\n", c.cfg.Name)
	fmt.Fprintf(&b, "    <zookeeper>\n        <node><host>127.0.0.1</host><port>%d</port></node>\n        <session_timeout_ms>10000</session_timeout_ms>\n    </zookeeper>\n", c.zkPort)
	fmt.Fprintf(&b, "    <macros>\n        <shard>%02d</shard>\n        <replica>r%d</replica>\n    </macros>\n", nd.Shard, nd.Replica)
	b.WriteString("    <distributed_ddl>\n        <path>/clickhouse/task_queue/ddl</path>\n    </distributed_ddl>\n")
	// A replica killed mid-insert keeps the part it wrote but never
	// committed to ZooKeeper. At its next start ClickHouse refuses to load
	// the table when such unexpected parts hold more than
	// replicated_max_ratio_of_wrong_parts (0.5) of the rows on disk, which in
	// a small table one batch can; at 1 it moves them to detached/ and
	// fetches what ZooKeeper lists from the other replica, as the documented
	// force_restore_data recovery does, so a crashed node comes back.
	b.WriteString("    <merge_tree>\n        <replicated_max_ratio_of_wrong_parts>1</replicated_max_ratio_of_wrong_parts>\n    </merge_tree>\n")
	return b.String()
}

func xmlText(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")
	return r.Replace(s)
}

func freePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("chcluster: free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
