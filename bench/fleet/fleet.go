// Package fleet runs harnessflow components as child processes of a driver
// (`harnessflow bench e2e`, `harnessflow chaos`): it starts them, kills them
// with SIGKILL, stops them with SIGTERM, restarts them with the same
// arguments, and records each one's peak resident memory across its lives.
//
// A child's stdout and stderr are appended to a log file, so its JSON logs
// survive the kills for the person reading a failed run. On Linux the kernel
// kills the children when the driver dies.
package fleet

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one component run as a child process. Set the exported fields, then
// call Start. Methods are safe for concurrent use.
type Proc struct {
	// Name labels the component in errors and reports ("processors").
	Name string
	// Bin is the executable, Args its arguments (without argv[0]).
	Bin  string
	Args []string
	// Env is added to the driver's environment.
	Env []string
	// LogPath receives the child's stdout and stderr (appended). Empty:
	// discarded.
	LogPath string
	// MetricsURL is the child's Prometheus /metrics; when set, its
	// go_gc_heap_live_bytes is sampled every second for PeakLiveHeapMB.
	MetricsURL string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
	peakKB   int64
	peakLive float64 // bytes
	// gen counts ResetPeak calls: a sample read before a reset and stored
	// after it would carry the old peak into the new measurement.
	gen        int
	starts     int
	kills      int
	logFile    *os.File
	stopSample chan struct{}
}

// ErrNotRunning is returned by Kill and Stop when the child is not running.
var ErrNotRunning = errors.New("fleet: child not running")

// Start starts a new life of the child. It fails when one is running.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("fleet: %s already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = sysProcAttr()
	if p.LogPath != "" {
		if p.logFile == nil {
			f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return fmt.Errorf("fleet: %s log: %w", p.Name, err)
			}
			p.logFile = f
		}
		fmt.Fprintf(p.logFile, "### fleet: start %d of %s at %s\n", p.starts+1, p.Name, time.Now().UTC().Format(time.RFC3339Nano))
		cmd.Stdout, cmd.Stderr = p.logFile, p.logFile
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fleet: start %s (%s): %w", p.Name, p.Bin, err)
	}
	p.cmd = cmd
	p.starts++
	done := make(chan struct{})
	stop := make(chan struct{})
	p.done, p.stopSample = done, stop
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	go p.sample(cmd.Process.Pid, done, stop)
	if p.MetricsURL != "" {
		go p.sampleLive(p.MetricsURL, done, stop)
	}
	return nil
}

// sampleLive records the child's live heap every second while it lives (a
// failed scrape, as while the child starts, is skipped). A scrape may take
// up to liveScrapeTimeout: on a loaded machine a child answers /metrics
// late, and a sampler that gave up after the period measured nothing.
func (p *Proc) sampleLive(url string, done, stop <-chan struct{}) {
	client := &http.Client{Timeout: liveScrapeTimeout}
	every(time.Second, false, done, stop, func() { p.recordLive(client, url) })
}

// liveScrapeTimeout bounds one scrape of a child's /metrics.
const liveScrapeTimeout = 10 * time.Second

// recordLive scrapes the child's live heap once and keeps the peak.
func (p *Proc) recordLive(client *http.Client, url string) {
	gen := p.generation()
	v, err := liveHeapBytes(client, url)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.gen == gen {
		p.peakLive = max(p.peakLive, v)
	}
	p.mu.Unlock()
}

// liveHeapBytes is the child's go_gc_heap_live_bytes, the heap its last
// GC marked live; before its first GC (0) the heap it has allocated,
// go_memstats_heap_alloc_bytes, stands in (an upper bound).
func liveHeapBytes(client *http.Client, url string) (float64, error) {
	v, err := scrapeGauge(client, url, "go_gc_heap_live_bytes")
	if err != nil || v > 0 {
		return v, err
	}
	return scrapeGauge(client, url, "go_memstats_heap_alloc_bytes")
}

// every calls f each period (and once at the start when now is set) until
// done or stop is closed.
func every(period time.Duration, now bool, done, stop <-chan struct{}, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	if now {
		f()
	}
	for {
		select {
		case <-done:
			return
		case <-stop:
			return
		case <-t.C:
		}
		f()
	}
}

// scrapeGauge reads one unlabeled sample from a Prometheus text exposition.
func scrapeGauge(client *http.Client, url, name string) (float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// PeakLiveHeapMB is the largest live heap (liveHeapBytes) sampled since the
// start or the last ResetPeak, in MiB; 0 without MetricsURL or a sample.
// When no sample was taken since the reset (a short run on a loaded
// machine), it scrapes the child once now.
func (p *Proc) PeakLiveHeapMB() float64 {
	p.mu.Lock()
	live, url := p.peakLive, p.MetricsURL
	p.mu.Unlock()
	if live == 0 && url != "" {
		p.recordLive(&http.Client{Timeout: liveScrapeTimeout}, url)
		p.mu.Lock()
		live = p.peakLive
		p.mu.Unlock()
	}
	return live / (1 << 20)
}

// sample records the child's VmHWM every 100ms while it lives: the last
// sample before a SIGKILL is at most that old.
func (p *Proc) sample(pid int, done, stop <-chan struct{}) {
	every(100*time.Millisecond, true, done, stop, func() { p.record(pid) })
}

func (p *Proc) record(pid int) {
	gen := p.generation()
	kb, err := PeakRSSKB(pid)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.gen == gen && kb > p.peakKB {
		p.peakKB = kb
	}
	p.mu.Unlock()
}

func (p *Proc) generation() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// Pid is the running child's pid, 0 when none runs.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether a life of the child is running.
func (p *Proc) Running() bool { return p.Pid() != 0 }

// Done is closed when the current life ends (nil before the first Start).
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is how the last life ended (nil: exit 0 or still running).
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Kill sends SIGKILL and waits for the child to be gone: a crash.
func (p *Proc) Kill() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil || isClosed(done) {
		p.mu.Unlock()
		return fmt.Errorf("kill %s: %w", p.Name, ErrNotRunning)
	}
	p.kills++
	p.mu.Unlock()
	p.record(cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	return nil
}

// Stop sends SIGTERM, waits up to timeout for a clean exit (the component
// drains and flushes), then SIGKILLs. It returns the child's exit error when
// it did not exit cleanly in time.
func (p *Proc) Stop(timeout time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return nil
	}
	p.record(cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		if err := p.ExitErr(); err != nil {
			return fmt.Errorf("stop %s: %w (log: %s)", p.Name, err, p.LogPath)
		}
		return nil
	case <-time.After(timeout):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("stop %s: no clean exit within %v, killed (log: %s)", p.Name, timeout, p.LogPath)
	}
}

// Restart kills the running life (if any) and starts a new one.
func (p *Proc) Restart() error {
	if p.Running() {
		if err := p.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
			return err
		}
	}
	return p.Start()
}

// Close stops the child (SIGTERM, then SIGKILL after timeout) and closes its
// log file.
func (p *Proc) Close(timeout time.Duration) error {
	err := p.Stop(timeout)
	p.mu.Lock()
	if p.logFile != nil {
		p.logFile.Close()
		p.logFile = nil
	}
	p.mu.Unlock()
	return err
}

// PeakRSSMB is the largest resident set of any life of the child, in MiB.
func (p *Proc) PeakRSSMB() float64 {
	if pid := p.Pid(); pid != 0 {
		p.record(pid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return float64(p.peakKB) / 1024
}

// ResetPeak starts a new peak measurement (between measurement phases): it
// forgets the recorded peak and resets the running child's VmHWM to its
// current RSS (writing 5 to /proc/PID/clear_refs, Linux 4.0+). It fails when
// the kernel refuses; the recorded peak is forgotten either way, so a
// caller that goes on reads the peak since the child started.
func (p *Proc) ResetPeak() error {
	var err error
	if pid := p.Pid(); pid != 0 {
		if werr := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0); werr != nil {
			err = fmt.Errorf("reset the peak RSS of %s: %w", p.Name, werr)
		}
	}
	// After the kernel's reset: samples taken before it are dropped (gen).
	p.mu.Lock()
	p.peakKB, p.peakLive = 0, 0
	p.gen++
	p.mu.Unlock()
	return err
}

// Starts and Kills count the lives started and the SIGKILLs sent.
func (p *Proc) Starts() int { p.mu.Lock(); defer p.mu.Unlock(); return p.starts }
func (p *Proc) Kills() int  { p.mu.Lock(); defer p.mu.Unlock(); return p.kills }

// PeakRSSKB reads a process's peak resident set size (VmHWM) in KiB from
// /proc. It fails where /proc is not available.
func PeakRSSKB(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("fleet: no VmHWM in /proc/%d/status", pid)
}

func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
