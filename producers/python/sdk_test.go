// Package python_test runs the Python SDK's tests (producers/python/tests,
// `python3 -m unittest`) against a live ingest gateway on an embedded broker,
// then reads the topics back: every event the Python tests report delivered
// must be there, once, with the token's project, and every event they report
// refused or dropped must not.
package python_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers/ingest"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

const (
	token   = "tok-python"
	project = "py-project"
)

// python returns the interpreter to test with: $HF_PYTHON, or python3 from
// PATH. Without one of Python 3.9 or later the test is skipped, or fails
// under CI=true.
func python(t *testing.T) string {
	t.Helper()
	name := os.Getenv("HF_PYTHON")
	if name == "" {
		name = "python3"
	}
	missing := func(why string) {
		testenv.Missing(t, "the Python SDK's tests need Python 3.9+: "+why)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		missing(err.Error())
	}
	if out, err := exec.Command(path, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").CombinedOutput(); err != nil {
		missing(path + " is older than 3.9 or does not run: " + err.Error() + " " + string(out))
	}
	return path
}

// startGateway runs the ingest gateway on brokers until the test ends and
// returns its base URL.
func startGateway(t *testing.T, brokers string) string {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# the Python SDK's tests\n"+token+" "+project+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := ingest.New(ingest.Config{Brokers: []string{brokers}, Listen: "127.0.0.1:0", TokensFile: tokens})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("gateway: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready after 30s")
	}
	return "http://" + srv.Addr()
}

// jsonRequired returns, per raw event type, the fields schemas.ParseJSON
// requires (those it reports missing from an event of only its type), and
// under "Artifact" those of a harness_update artifact.
func jsonRequired(t *testing.T) map[string][]string {
	t.Helper()
	missing := func(doc, prefix string) []string {
		_, err := schemas.ParseJSON([]byte(doc), schemas.DefaultLimits())
		if err == nil {
			t.Fatalf("ParseJSON(%s): no error", doc)
		}
		var out []string
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			var fe *schemas.FieldError
			if errors.As(e, &fe) && fe.Code == schemas.CodeMissingField && strings.HasPrefix(fe.Field, prefix) {
				out = append(out, strings.TrimPrefix(fe.Field, prefix))
			}
		}
		sort.Strings(out)
		return out
	}
	req := map[string][]string{}
	for _, typ := range producerstest.RawTypes {
		req[string(typ)] = missing(`{"type":"`+string(typ)+`"}`, "")
	}
	req["Artifact"] = missing(`{"type":"harness_update","cell_id":"c","update_id":"u","from_version":"a","to_version":"b","artifacts":[{}]}`, "artifacts[0].")
	if len(req["task_attempt"]) == 0 || len(req["Artifact"]) == 0 {
		t.Fatalf("no required fields found: %v", req)
	}
	return req
}

// readReport returns the event ids the Python tests expect on the topics
// ("+ID" lines) and those they expect absent ("-ID").
func readReport(t *testing.T, path string) (want, absent []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the Python tests wrote no report: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "+"):
			want = append(want, line[1:])
		case strings.HasPrefix(line, "-"):
			absent = append(absent, line[1:])
		case line != "":
			t.Fatalf("report: bad line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return want, absent
}

func TestPythonSDK(t *testing.T) {
	t.Parallel()
	py := python(t)
	b := testenv.Kafka(t)
	url := startGateway(t, b.Addr())
	req, err := json.Marshal(jsonRequired(t))
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report")

	ctx, cancel := testenv.Context(t)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Env = append(os.Environ(),
		"HF_TEST_URL="+url, "HF_TEST_TOKEN="+token, "HF_TEST_PROJECT="+project,
		"HF_TEST_REQUIRED="+string(req), "HF_TEST_REPORT="+report, "HF_TEST_REQUIRE_LIVE=1",
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest (in producers/python): %v\n%s", err, out)
	}
	t.Logf("python3 -m unittest:\n%s", out)

	want, absent := readReport(t, report)
	if len(want) < 100 || len(absent) < 10 {
		t.Fatalf("the Python tests reported %d delivered and %d absent events; want at least 100 and 10", len(want), len(absent))
	}
	stored := map[string]int{}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	for _, topic := range schemas.RawTopics {
		msgs, err := producerstest.ReadTopic(rctx, b.Addr(), topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			ev, err := schemas.Decode(m.Value)
			if err != nil {
				t.Fatalf("%s: %v", topic, err)
			}
			h := ev.Header()
			if h.Project != project {
				t.Errorf("%s: event %s has project %q, want the token's %q", topic, h.EventID, h.Project, project)
			}
			if schemas.TopicFor(ev.Type()) != topic {
				t.Errorf("event %s (%s) is on %s", h.EventID, ev.Type(), topic)
			}
			stored[h.EventID]++
		}
	}
	for _, id := range want {
		if stored[id] != 1 {
			t.Errorf("event %s: stored %d times, want once", id, stored[id])
		}
	}
	for _, id := range absent {
		if stored[id] != 0 {
			t.Errorf("event %s: refused or dropped by the client, yet stored %d times", id, stored[id])
		}
	}
}

// installRecipe returns the shell lines of the first ```sh block under the
// heading "## Install" of the Markdown file path (README.md's own block
// under **Python.** is compared to it by the caller).
func installRecipe(t *testing.T, path, after string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, after)
	if i < 0 {
		t.Fatalf("%s has no %q", path, after)
	}
	text = text[i:]
	start := strings.Index(text, "```sh\n")
	if start < 0 {
		t.Fatalf("%s: no ```sh block after %q", path, after)
	}
	text = text[start+len("```sh\n"):]
	end := strings.Index(text, "```")
	if end < 0 {
		t.Fatalf("%s: the ```sh block after %q does not end", path, after)
	}
	var lines []string
	for _, l := range strings.Split(text[:end], "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestPythonInstallAsDocumented runs the install recipe of
// producers/python/README.md (the same lines as README.md's), line by
// line, in an empty folder that holds a copy of producers/python where the
// recipe expects it, with the package index turned off (PIP_NO_INDEX, and
// no proxy): the venv's python must then import the package from the
// venv. python3 is $HF_PYTHON or the one on PATH; without its venv module
// and ensurepip (Debian: python3-venv) the test is skipped, or fails under
// CI=true.
func TestPythonInstallAsDocumented(t *testing.T) {
	t.Parallel()
	py := python(t)
	recipe := installRecipe(t, "README.md", "## Install")
	if top := installRecipe(t, filepath.Join("..", "..", "README.md"), "**Python.**"); strings.Join(top, "\n") != strings.Join(recipe, "\n") {
		t.Fatalf("README.md's install lines %q differ from producers/python/README.md's %q", top, recipe)
	}
	if len(recipe) == 0 {
		t.Fatal("the install recipe is empty")
	}
	if out, err := exec.Command(py, "-c", "import venv, ensurepip").CombinedOutput(); err != nil {
		testenv.Missing(t, py+" has no venv module with ensurepip (Debian: apt install python3-venv; infra/scripts/ensure-deps.sh --test): "+
			err.Error()+" "+string(out))
	}

	work := t.TempDir()
	src := filepath.Join(work, "producers", "python")
	for _, dir := range []string{"_build", "harnessflow"} {
		if err := os.CopyFS(filepath.Join(src, dir), os.DirFS(dir)); err != nil {
			t.Fatalf("copy %s: %v", dir, err)
		}
	}
	for _, file := range []string{"pyproject.toml", "README.md"} {
		b, err := os.ReadFile(file)
		if err == nil {
			err = os.WriteFile(filepath.Join(src, file), b, 0o644)
		}
		if err != nil {
			t.Fatalf("copy %s: %v", file, err)
		}
	}
	// python3 on PATH is the interpreter under test.
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(py, filepath.Join(bin, "python3")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + work,
		"PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_CACHE_DIR=1", "PIP_CONFIG_FILE=" + os.DevNull,
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "PYTHONDONTWRITEBYTECODE=1"}
	ctx, cancel := testenv.Context(t)
	defer cancel()
	for _, line := range recipe {
		cmd := exec.CommandContext(ctx, "sh", "-ec", line)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		t.Logf("$ %s\n%s", line, out)
	}
	check := exec.CommandContext(ctx, filepath.Join(work, ".venv", "bin", "python"), "-c",
		"import harnessflow, harnessflow.events, os; print(os.path.realpath(harnessflow.__file__)); print(harnessflow.__version__)")
	check.Dir, check.Env = t.TempDir(), env
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("import harnessflow with the venv's python: %v\n%s", err, out)
	}
	lines := strings.Fields(string(out))
	venv, _ := filepath.EvalSymlinks(filepath.Join(work, ".venv"))
	if len(lines) != 2 || !strings.HasPrefix(lines[0], venv+string(filepath.Separator)) || !strings.Contains(lines[0], "site-packages") {
		t.Fatalf("harnessflow imported from %q, want the venv's site-packages under %s", out, venv)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(lines[0]), "py.typed")); err != nil {
		t.Errorf("the installed package has no py.typed: %v", err)
	}
}
