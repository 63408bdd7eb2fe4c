package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docFiles are the documents a user reads: the README, docs/ and the
// packages' READMEs.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	var out []string
	for _, pat := range []string{"README.md", "docs/*.md", "*/README.md", "*/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	sort.Strings(out)
	if len(out) < 5 {
		t.Fatalf("found %d documents: not the module's tree", len(out))
	}
	return out
}

// commandFlags maps each command path ("harnessflow up") to its flags,
// inherited ones included.
func commandFlags(root *cobra.Command) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		fs := map[string]bool{"help": true}
		add := func(f *pflag.Flag) { fs[f.Name] = true }
		c.Flags().VisitAll(add)
		c.InheritedFlags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		out[c.CommandPath()] = fs
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// externalFlags are flags of other tools the documents show with theirs:
// pip, python, curl, clickhouse-client, kafka-topics, docker-compose,
// OpenRLHF and LightRFT, farm-bench, Prometheus, the ensure-deps script.
var externalFlags = map[string]bool{
	"no-build-isolation": true, "no-deps": true, "system-site-packages": true, "check": true, "user": true, "break-system-packages": true,
	"data-binary": true, "header": true, "fail": true, "silent": true, "show-error": true, "data": true, "request": true,
	"host": true, "port": true, "query": true, "password": true, "format": true, "multiquery": true,
	"command-config": true, "bootstrap-server": true, "build": true, "force-recreate": true, "remove-orphans": true, "profile": true, "file": true, "detach": true, "wait": true,
	"remote": true, "reward": true, "remote_rm_url": true, "vs": true, "pid": true, "config": true, "storage": true,
	"test": true, "no-hardlinks": true, "race": true, "count": true, "run": true, "bench": true, "timeout": true, "tags": true,
}

// docEnvVars are variables the documents define for the user's own code
// (a reward script's URL), not read by harnessflow.
var docEnvVars = map[string]bool{"HF_REWARDS_URL": true}

// codeOf returns the code in a document's lines: whole lines inside fenced
// blocks, and the backquoted spans elsewhere, with their line numbers.
func codeOf(text string) map[int][]string {
	out := map[int][]string{}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			out[i+1] = append(out[i+1], line)
			continue
		}
		parts := strings.Split(line, "`")
		for k := 1; k < len(parts); k += 2 {
			out[i+1] = append(out[i+1], parts[k])
		}
	}
	return out
}

// TestDocsNameRealCommandsAndFlags: in the documents' code (fenced blocks
// and backquoted spans), every `harnessflow SUB` is a subcommand, every
// flag in a span or fenced line that names subcommands is a flag of one of
// them (inherited ones included), every other --flag is a flag of some subcommand or of a
// tool in externalFlags, and every HF_ variable anywhere is a flag's (HF_ +
// its name in upper case), one the code or a compose file reads, or one a
// document defines for the user's code.
func TestDocsNameRealCommandsAndFlags(t *testing.T) {
	t.Parallel()
	root := newRoot()
	flags := commandFlags(root)
	anyCmd := map[string]bool{}
	env := map[string]bool{}
	for _, fs := range flags {
		for f := range fs {
			anyCmd[f] = true
			env["HF_"+strings.ToUpper(strings.ReplaceAll(f, "-", "_"))] = true
		}
	}
	for v := range codeEnvVars(t) {
		env[v] = true
	}
	for v := range docEnvVars {
		env[v] = true
	}
	cmdRe := regexp.MustCompile(`(?:^|[^\w./-])harnessflow((?: [a-z][a-z0-9-]*)+)`)
	flagRe := regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9_-]*)`)
	envRe := regexp.MustCompile(`\bHF_[A-Z0-9_]*[A-Z0-9]\b`)
	var bad []string
	for _, path := range docFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(filepath.Join("..", ".."), path)
		for i, line := range strings.Split(string(b), "\n") {
			for _, v := range envRe.FindAllString(line, -1) {
				if !env[v] {
					bad = append(bad, rel+":"+strconv.Itoa(i+1)+": "+v+" is neither a flag's variable nor one the code reads")
				}
			}
		}
		code := codeOf(string(b))
		lines := make([]int, 0, len(code))
		for n := range code {
			lines = append(lines, n)
		}
		sort.Ints(lines)
		for _, n := range lines {
			where := rel + ":" + strconv.Itoa(n)
			for _, joined := range code[n] {
				onLine := map[string]bool{}
				for _, m := range cmdRe.FindAllStringSubmatch(joined, -1) {
					words := strings.Fields(m[1])
					p := "harnessflow"
					for _, w := range words {
						if _, ok := flags[p+" "+w]; !ok {
							break
						}
						p += " " + w
					}
					if p == "harnessflow" {
						bad = append(bad, where+": `harnessflow "+words[0]+"` is no subcommand")
						continue
					}
					onLine[p] = true
				}
				for _, m := range flagRe.FindAllStringSubmatch(joined, -1) {
					f := m[1]
					if externalFlags[f] {
						continue
					}
					if prefix, family := strings.CutSuffix(f, "-"); family { // --kafka-*: a family of flags
						known := false
						for g := range anyCmd {
							known = known || strings.HasPrefix(g, prefix+"-")
						}
						if !known {
							bad = append(bad, where+": no flag starts with --"+f)
						}
						continue
					}
					if !anyCmd[f] {
						bad = append(bad, where+": --"+f+" is no flag of any subcommand")
						continue
					}
					if len(onLine) > 0 {
						ok := false
						var names []string
						for p := range onLine {
							ok = ok || flags[p][f]
							names = append(names, "`"+p+"`")
						}
						sort.Strings(names)
						if !ok {
							bad = append(bad, where+": --"+f+" is not a flag of "+strings.Join(names, " or "))
						}
					}
				}
			}
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// codeEnvVars are the HF_ variables the module's code (tests included: a
// document may name a test's variable) and compose files name.
func codeEnvVars(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	re := regexp.MustCompile(`\b(HF_[A-Z0-9_]*[A-Z0-9])\b`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".yml")) || d.Name() == "docs_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadmeListsEverySubcommand: the README's "Every subcommand" table has
// a row naming each subcommand (and each subcommand of bench and import).
func TestReadmeListsEverySubcommand(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## Every subcommand")
	if start < 0 {
		t.Fatal(`README.md has no "## Every subcommand" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `") {
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			rows = append(rows, first)
		}
	}
	listed := func(name string) bool {
		for _, r := range rows {
			if strings.Contains(r, "`"+name+"`") || strings.Contains(r, "`"+name+" ") {
				return true
			}
		}
		return false
	}
	root := newRoot()
	for _, c := range root.Commands() {
		if c.Name() == "help" || c.Name() == "completion" || c.Hidden {
			continue
		}
		if !listed(c.Name()) {
			t.Errorf("README's Every subcommand table has no row for `%s` (%s)", c.Name(), c.Short)
		}
		if c.Name() == "bench" || c.Name() == "import" {
			for _, sub := range c.Commands() {
				if sub.Name() != "help" && !listed(c.Name()+" "+sub.Name()) {
					t.Errorf("README's Every subcommand table has no row for `%s %s` (%s)", c.Name(), sub.Name(), sub.Short)
				}
			}
		}
	}
}

// TestDesignCitationsResolve: the code and documents cite the design and the
// metric definitions in the repository, docs/design.md §N (a section that
// exists) and docs/metrics.md; a bare DESIGN.md or METRICS.md (files not in
// the repository) is left only in the released SQL migrations, which cannot
// change.
func TestDesignCitationsResolve(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	design, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "docs", "metrics.md")); err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\d+)\. `).FindAllStringSubmatch(string(design), -1) {
		sections[m[1]] = true
	}
	if len(sections) < 7 {
		t.Fatalf("docs/design.md has sections %v, want §1 to §7", sections)
	}
	cite := regexp.MustCompile(`docs/design\.md §(\d+)`)
	bare := regexp.MustCompile(`(?:^|[^/\w])(DESIGN|METRICS)\.md`)
	files := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if n := d.Name(); n == "node_modules" || n == "testdata" || (strings.HasPrefix(n, ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if !map[string]bool{".go": true, ".md": true, ".py": true, ".yml": true, ".json": true, ".sh": true, ".sql": true}[ext] ||
			d.Name() == "docs_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		text := string(b)
		for _, m := range cite.FindAllStringSubmatch(text, -1) {
			if !sections[m[1]] {
				t.Errorf("%s cites docs/design.md §%s, which has no such section", rel, m[1])
			}
		}
		released := ext == ".sql" && strings.HasPrefix(rel, filepath.Join("infra", "chddl"))
		if rel == filepath.Join("docs", "design.md") || rel == filepath.Join("docs", "metrics.md") || released {
			return nil
		}
		for i, line := range strings.Split(text, "\n") {
			if bare.MatchString(line) {
				t.Errorf("%s:%d cites %s, which is not in the repository: cite docs/design.md §N or docs/metrics.md", rel, i+1, bare.FindString(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d files: not the module's tree", files)
	}
}

// TestLogFormatFlag: --log-format (HF_LOG_FORMAT) takes auto, json or
// console on every command; another value is a usage error naming them.
func TestLogFormatFlag(t *testing.T) {
	for _, args := range [][]string{{"consume", "--log-format", "yaml"}, {"migrate", "--log-format", "xml"}} {
		root := newRoot()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "auto, json or console") {
			t.Errorf("%v: %v, want exit 2 naming the formats", args, err)
		}
	}
	t.Setenv("HF_LOG_FORMAT", "pretty")
	root := newRoot()
	root.SetArgs([]string{"consume"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("HF_LOG_FORMAT=pretty: %v, want the --log-format error", err)
	}
}
