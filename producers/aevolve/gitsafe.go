package aevolve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Reading a workspace repository safely.
//
// git reads a repository's own .git/config on every command, and that file
// can name programs git runs: gpg.program (and gpg.<format>.program) with
// log.showSignature, core.fsmonitor, core.pager and pager.<cmd>,
// diff.external, diff.<driver>.command and .textconv, filter.<driver>.*,
// core.sshCommand, core.askPass, credential.helper, core.hooksPath with
// hooks, include.path and includeIf pulling in any other file, and keys added
// by later git versions. Neutralising them one by one with -c overrides is a
// list that is never known to be complete, and there is no switch that makes
// git skip the repository's config. So the importer never lets git see the
// workspace's .git directory: it copies the object store (loose objects and
// packs, regular files only, no objects/info: no alternates pointing
// elsewhere) into a fresh temporary repository, reads the tags itself from
// refs/tags and packed-refs (names checked), and writes that repository's
// config, HEAD and packed-refs itself. git then runs on the copy with the
// system and global config off (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL and
// HOME pointing into the copy), every GIT_* variable of the caller's
// environment dropped, no pager, no external diff or textconv, and a timeout
// per command; the -c overrides are kept as a second fence. The copy costs
// the size of the object store, which is small for A-Evolve workspaces
// (text files over a few dozen commits) and capped at 16 times
// Config.MaxFileBytes.

// gitTimeout bounds one git command on a workspace copy.
const gitTimeout = 2 * time.Minute

// gitOverrides are -c settings passed to every git command: a second fence
// should a config file be read after all.
var gitOverrides = []string{
	"core.quotePath=false", "core.fsmonitor=false", "core.pager=cat", "core.hooksPath=/dev/null",
	"core.sshCommand=false", "core.askPass=", "credential.helper=", "diff.external=",
	"log.showSignature=false", "gpg.program=false", "gpg.openpgp.program=false",
	"gpg.x509.program=false", "gpg.ssh.program=false", "core.attributesFile=/dev/null",
}

// gitRepo runs git on a private copy of a workspace repository.
type gitRepo struct {
	ctx  context.Context
	git  string
	dir  string // the copy's git directory
	home string // HOME and XDG_CONFIG_HOME of the git commands: empty
	max  int    // cap on one command's output
}

// run runs git with args and returns its output; output over g.max is an
// error.
func (g *gitRepo) run(args ...string) (string, error) {
	out, over, err := g.runCap(g.max, args...)
	if err == nil && over {
		err = fmt.Errorf("git %s: output over %d bytes", shown(strings.Join(args, " ")), g.max)
	}
	return out, err
}

// runCap runs git with args, keeping at most max bytes of its output; over
// says whether there was more.
func (g *gitRepo) runCap(max int, args ...string) (out string, over bool, err error) {
	ctx, cancel := context.WithTimeout(g.ctx, gitTimeout)
	defer cancel()
	full := []string{"--git-dir=" + g.dir, "--no-pager"}
	for _, o := range gitOverrides {
		full = append(full, "-c", o)
	}
	cmd := exec.CommandContext(ctx, g.git, append(full, args...)...)
	cmd.Dir = g.dir
	cmd.Env = g.env()
	cmd.Stdin = nil
	stdout := &capBuffer{max: max}
	var errb capBuffer
	errb.max = 4 << 10
	cmd.Stdout, cmd.Stderr = stdout, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil && g.ctx.Err() == nil {
			err = fmt.Errorf("%w (timed out after %s)", err, gitTimeout)
		}
		return "", false, fmt.Errorf("git %s: %w: %s", shown(strings.Join(args, " ")), err, shown(strings.TrimSpace(errb.b.String())))
	}
	return stdout.b.String(), stdout.over, nil
}

// env is the caller's environment without anything that configures git,
// a pager, an editor or a password prompt, and with git's own config
// files off.
func (g *gitRepo) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GIT_"), k == "HOME", k == "XDG_CONFIG_HOME", k == "SSH_ASKPASS",
			k == "PAGER", k == "LESS", k == "EDITOR", k == "VISUAL", k == "PREFIX":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+g.home, "XDG_CONFIG_HOME="+g.home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_SYSTEM=/dev/null", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_NO_REPLACE_OBJECTS=1", "GIT_OPTIONAL_LOCKS=0", "GIT_ATTR_NOSYSTEM=1", "GIT_PAGER=cat",
		"GIT_CEILING_DIRECTORIES="+filepath.Dir(g.dir))
}

// capBuffer keeps the first max bytes written to it and drops the rest
// (the writer goes on, so git does not fail on a closed pipe).
type capBuffer struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (w *capBuffer) Write(p []byte) (int, error) {
	room := w.max - w.b.Len()
	if len(p) > room {
		w.over = true
		if room > 0 {
			w.b.Write(p[:room])
		}
		return len(p), nil
	}
	return w.b.Write(p)
}

// The names copied from an object store or accepted as refs and tags.
var (
	hexDir     = regexp.MustCompile(`^[0-9a-f]{2}$`)
	looseName  = regexp.MustCompile(`^[0-9a-f]{38}$|^[0-9a-f]{62}$`)
	packName   = regexp.MustCompile(`^pack-[0-9a-f]{40,64}\.(pack|idx|rev)$`)
	objectHash = regexp.MustCompile(`^[0-9a-f]{40}$|^[0-9a-f]{64}$`)
	tagPart    = regexp.MustCompile(`^[A-Za-z0-9_+=-][A-Za-z0-9._+=-]*$`)
)

// copyWorkspace makes a private repository from the cell's
// workspace/.git: its objects and tags only. It returns the repository
// (to be removed with removeCopy) and the tag names, sorted.
func (im *importer) copyWorkspace(c *cellState, gitExe string) (*gitRepo, []string, error) {
	const src = "workspace/.git"
	tags, hashLen, err := readTags(c.fs, src)
	if err != nil {
		return nil, nil, err
	}
	tmp, err := os.MkdirTemp("", "harnessflow-aevolve-git-")
	if err != nil {
		return nil, nil, fmt.Errorf("workspace copy: %w", err)
	}
	g := &gitRepo{ctx: im.ctx, git: gitExe, dir: filepath.Join(tmp, "repo.git"), home: filepath.Join(tmp, "home"),
		max: int(min(c.fs.max, 1<<30))}
	if err := writeRepo(g.dir, g.home, tags, hashLen); err != nil {
		os.RemoveAll(tmp)
		return nil, nil, err
	}
	budget := 16 * c.fs.max
	if err := copyObjects(c.fs, src+"/objects", filepath.Join(g.dir, "objects"), &budget); err != nil {
		os.RemoveAll(tmp)
		return nil, nil, err
	}
	names := make([]string, 0, len(tags))
	for n := range tags {
		names = append(names, n)
	}
	sort.Strings(names)
	return g, names, nil
}

// removeCopy removes the private repository of g.
func (g *gitRepo) removeCopy() {
	if g != nil {
		os.RemoveAll(filepath.Dir(g.dir))
	}
}

// writeRepo writes a bare repository's skeleton whose config, HEAD and
// packed-refs are the importer's own.
func writeRepo(dir, home string, tags map[string]string, hashLen int) error {
	for _, d := range []string{home, filepath.Join(dir, "objects", "pack"), filepath.Join(dir, "refs", "heads"), filepath.Join(dir, "refs", "tags")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("workspace copy: %w", err)
		}
	}
	config := "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
	if hashLen == 64 {
		config = "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = sha256\n"
	}
	refs := make([]string, 0, len(tags))
	for n, h := range tags {
		refs = append(refs, h+" refs/tags/"+n+"\n")
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i][hashLen:] < refs[j][hashLen:] })
	files := map[string]string{"config": config, "HEAD": "ref: refs/heads/main\n",
		"packed-refs": "# pack-refs with: sorted \n" + strings.Join(refs, "")}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return fmt.Errorf("workspace copy: %w", err)
		}
	}
	return nil
}

// readTags reads the tags of the repository at src in the cell: the
// packed-refs file, then the loose refs under refs/tags (which win). A
// symbolic or malformed ref, or a name git would not accept, is left out.
// It returns tag -> object id and the id length (40 for SHA-1, 64 for
// SHA-256).
func readTags(fsys *cellFS, src string) (map[string]string, int, error) {
	tags := map[string]string{}
	if data, err := fsys.readFile(src + "/packed-refs"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			h, ref, ok := strings.Cut(strings.TrimSpace(line), " ")
			if n, isTag := strings.CutPrefix(ref, "refs/tags/"); ok && isTag && objectHash.MatchString(h) && validTag(n) {
				tags[n] = h
			}
		}
	} else if !os.IsNotExist(err) {
		return nil, 0, err
	}
	var walk func(rel, name string, depth int) error
	walk = func(rel, name string, depth int) error {
		if depth > 8 {
			return nil
		}
		for _, e := range fsys.readDir(rel) {
			n := path.Join(name, e.Name())
			switch {
			case e.IsDir():
				if err := walk(rel+"/"+e.Name(), n, depth+1); err != nil {
					return err
				}
			case e.Type().IsRegular() && validTag(n):
				data, err := fsys.readFile(rel + "/" + e.Name())
				if err != nil {
					return err
				}
				if h := strings.TrimSpace(string(data)); objectHash.MatchString(h) {
					tags[n] = h
				}
			}
		}
		return nil
	}
	if err := walk(src+"/refs/tags", "", 0); err != nil {
		return nil, 0, err
	}
	hashLen := 0
	for _, h := range tags {
		if hashLen != 0 && len(h) != hashLen {
			return nil, 0, &RefusedError{Path: src, Reason: "mixes SHA-1 and SHA-256 object ids in its tags"}
		}
		hashLen = len(h)
	}
	return tags, hashLen, nil
}

// validTag reports whether n is a tag name safe to write into packed-refs:
// slash-separated parts of letters, digits and ._+=-, none starting with a
// dot or ending in .lock.
func validTag(n string) bool {
	if n == "" || len(n) > 200 {
		return false
	}
	for _, p := range strings.Split(n, "/") {
		if !tagPart.MatchString(p) || strings.HasSuffix(p, ".lock") || strings.Contains(p, "..") {
			return false
		}
	}
	return true
}

// copyObjects copies the loose objects and packs of the object store at
// src in the cell to dst, regular files only, charging their sizes to
// budget.
func copyObjects(fsys *cellFS, src, dst string, budget *int64) error {
	for _, e := range fsys.readDir(src) {
		switch {
		case e.IsDir() && hexDir.MatchString(e.Name()):
			for _, o := range fsys.readDir(src + "/" + e.Name()) {
				if o.Type().IsRegular() && looseName.MatchString(o.Name()) {
					if err := copyFile(fsys, src+"/"+e.Name()+"/"+o.Name(), filepath.Join(dst, e.Name(), o.Name()), budget); err != nil {
						return err
					}
				}
			}
		case e.IsDir() && e.Name() == "pack":
			for _, p := range fsys.readDir(src + "/pack") {
				if p.Type().IsRegular() && packName.MatchString(p.Name()) {
					if err := copyFile(fsys, src+"/pack/"+p.Name(), filepath.Join(dst, "pack", p.Name()), budget); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// copyFile copies the regular file rel of the cell to dst.
func copyFile(fsys *cellFS, rel, dst string, budget *int64) error {
	f, size, err := fsys.openRegular(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	if size > *budget {
		return &RefusedError{Path: path.Dir(path.Dir(rel)), Reason: fmt.Sprintf("holds objects over the %d-byte cap of a workspace copy (16 times Config.MaxFileBytes)", 16*fsys.max)}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("workspace copy: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return fmt.Errorf("workspace copy: %w", err)
	}
	n, err := io.Copy(out, io.LimitReader(f, size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("workspace copy of %s: %w", shown(rel), err)
	}
	*budget -= n
	return nil
}
