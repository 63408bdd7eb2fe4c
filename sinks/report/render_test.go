package report

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

// chromium finds Debian's headless Chromium.
func chromium() string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// handReport is a small report built by hand: rendering needs no database.
func handReport() *Report {
	v := func(x float64) *float64 { return &x }
	r := &Report{Campaign: "render", Benchmarks: []string{"swe"}}
	r.Cells = []CellScore{
		{CellID: "a", Benchmark: "swe", Agent: "opus46", PassRate: 78},
		{CellID: "b", Benchmark: "swe", Agent: "opus46", Evolver: "qwen32b", PassRate: 81},
		{CellID: "c", Benchmark: "swe", Agent: "qwen235b", PassRate: 21},
		{CellID: "d", Benchmark: "swe", Agent: "qwen235b", Evolver: "qwen32b", PassRate: 40},
	}
	r.buildMatrices()
	for c := int64(1); c <= 4; c++ {
		r.Rounds = append(r.Rounds, RoundPoint{Benchmark: "swe", Evolver: "qwen32b", Cycle: c, Cells: 2, PassRate: 40 + 5*float64(c), Stddev: v(8)})
		r.Rounds = append(r.Rounds, RoundPoint{Benchmark: "swe", Evolver: "", Cycle: c, Cells: 2, PassRate: 45, Stddev: v(3)})
	}
	r.Adherence = []Adherence{
		{Benchmark: "swe", Agent: "opus46", Phase: [5]*float64{v(.89), v(.87), v(.85), v(.82), v(.80)}, Drift: v(-.09)},
		{Benchmark: "swe", Agent: "qwen35_9b", Phase: [5]*float64{v(.52), v(.40), v(.30), v(.2), v(.13)}, Drift: v(-.39)},
	}
	cmp := func(metric, base string, m, b float64) CriticComparison {
		return CriticComparison{Metric: metric, Baseline: base, Model: CriticValue{Value: m, Low: v(m - 0.02), High: v(m + 0.02)},
			Best: CriticValue{Value: b}, Diff: m - b, Ahead: (metric == "rmse") == (m < b)}
	}
	c := CriticCurve{Trainer: "critic"}
	for i, s := range []int64{100, 200, 400, 800} {
		f := float64(i)
		c.Points = append(c.Points, CriticPoint{ModelVersion: fmt.Sprintf("v%d", i+1), SamplesTrained: s, HeldoutRows: 240, HeldoutGroups: 12, Verdict: VerdictNoSignal,
			Comparisons: []CriticComparison{cmp("rmse", "median", 0.2-0.02*f, 0.18), cmp("spearman", "evidence-regression", 0.1+0.1*f, 0.19)}})
	}
	c.NoSignal = noSignal(&c.Points[len(c.Points)-1])
	r.Critic = []CriticCurve{c}
	return r
}

// TestHTMLRendersInChromium renders the HTML report in headless Chromium and
// checks the screenshot is not blank. `make test` installs Chromium
// (infra/scripts/ensure-deps.sh --test); under CI=true or HF_CHROMIUM_TEST=1 a
// missing Chromium fails the test, elsewhere it is skipped with a message
// (infra/scripts/render_report.sh does the same check on any report file).
func TestHTMLRendersInChromium(t *testing.T) {
	bin := chromium()
	if bin == "" {
		if os.Getenv("HF_CHROMIUM_TEST") == "1" {
			t.Fatal("no chromium on PATH (HF_CHROMIUM_TEST=1 requires it): apt-get install -y chromium")
		}
		testenv.Missing(t, "chromium not installed (apt-get install -y chromium, or set HF_CHROMIUM_TEST=1 to require it)")
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	var b bytes.Buffer
	if err := handReport().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "shot.png")
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1200,1400", "--screenshot="+shot, "file://"+page)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	done := make(chan error, 1)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, out.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("chromium did not finish\n%s", out.String())
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, out.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	nonWhite, colors := nonBlank(img)
	total := img.Bounds().Dx() * img.Bounds().Dy()
	if nonWhite*100 < total || colors < 20 {
		t.Fatalf("screenshot looks blank: %d of %d pixels not white, %d colours", nonWhite, total, colors)
	}
}

// nonBlank counts the pixels that are not white and the distinct colours.
func nonBlank(img image.Image) (nonWhite, colors int) {
	seen := map[[3]uint32]bool{}
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || b < 0xf000 {
				nonWhite++
			}
			seen[[3]uint32{r >> 8, g >> 8, b >> 8}] = true
		}
	}
	return nonWhite, len(seen)
}
