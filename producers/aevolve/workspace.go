package aevolve

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harnessflow/harnessflow/schemas"
)

// readWorkspace reads the workspace's git tags (evo-N, pre-evo-N): the skill
// count of every harness version and one harness_update per evo-N (N >= 1)
// whose diff changes a harness file. It also reads unified_steps.jsonl for
// each cycle's verdict and the evolver's report.
func (im *importer) readWorkspace(c *cellState) error {
	ws := filepath.Join(c.dir, "workspace")
	if !c.fs.exists("workspace/.git") {
		return nil
	}
	git, err := exec.LookPath(im.cfg.Git)
	if err != nil {
		return fmt.Errorf("%s: %w", shown(ws), ErrNoGit)
	}
	f := &FileReport{Path: im.rel(ws) + " (git tags)"}
	defer im.file(f)
	g, tagNames, err := im.copyWorkspace(c, git)
	if err != nil {
		im.refuse(f, err)
		return nil
	}
	c.git = g
	evo := map[int]bool{}
	pre := map[int]bool{}
	for _, t := range tagNames {
		switch {
		case strings.HasPrefix(t, "pre-evo-"):
			if n, err := strconv.Atoi(strings.TrimPrefix(t, "pre-evo-")); err == nil {
				pre[n] = true
				continue
			}
		case strings.HasPrefix(t, "evo-"):
			if n, err := strconv.Atoi(strings.TrimPrefix(t, "evo-")); err == nil {
				evo[n] = true
				continue
			}
		}
		f.skip("not an evo tag")
	}
	ns := make([]int, 0, len(evo))
	for n := range evo {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	for _, n := range ns {
		tag := fmt.Sprintf("evo-%d", n)
		files, err := g.run("ls-tree", "-r", "--name-only", tag, "--", "skills")
		if err != nil {
			return err
		}
		k := 0
		for _, p := range strings.Split(files, "\n") {
			if filepath.Base(p) == "SKILL.md" {
				k++
			}
		}
		c.skillsAt[n] = k
		if n == 0 {
			f.Read++
			if ts, ok := g.commitTime(tag); ok && c.base.IsZero() {
				c.base = ts
			}
			continue
		}
		from := fmt.Sprintf("pre-evo-%d", n)
		if !pre[n] {
			from = fmt.Sprintf("evo-%d", n-1)
			if !evo[n-1] {
				f.skip("no pre-evo or previous evo tag")
				continue
			}
		}
		u, reason, err := im.update(c, g, from, tag, n, f)
		if err != nil {
			return err
		}
		if reason != "" {
			f.skip(reason)
			continue
		}
		f.Read++
		c.updates = append(c.updates, u)
		if ts, ok := g.commitTime(tag); ok {
			c.updateTime[u.UpdateID] = ts
		}
	}
	im.readVerdicts(c)
	c.chain(ns)
	return nil
}

// chain sets each update's from_version to the version the cell's harness
// is at when it comes, and records, for every evo tag, the version the
// agent then runs (versionAt), the way the processors follow a cell: an
// accepted update that was not rolled back moves the cell to its version;
// a rejected or rolled-back one leaves it where it was; a tag whose diff
// changed no harness file (empty, manifest only, everything left out) is
// no update, and its rounds run the version before it. Assuming every tag
// n were a version evo-n broke the chain at the first such tag: every
// later update and attempt was dead-lettered.
func (c *cellState) chain(tags []int) {
	byCycle := map[int32]*schemas.HarnessUpdate{}
	for _, u := range c.updates {
		byCycle[u.Cycle] = u
	}
	current := "evo-0"
	c.versionAt = map[int]string{0: current}
	for _, n := range tags {
		if u := byCycle[int32(n)]; u != nil {
			u.FromVersion = current
			if u.Accepted && !u.RolledBack {
				current = u.ToVersion
			}
		}
		c.versionAt[n] = current
	}
}

// versionFor is the harness version the agent runs after k evolution
// cycles: the version of the last evo tag at or before k (evo-k without a
// workspace to say otherwise).
func (c *cellState) versionFor(k int) string {
	if len(c.versionAt) == 0 {
		return fmt.Sprintf("evo-%d", k)
	}
	best, v := -1, "evo-0"
	for n, ver := range c.versionAt {
		if n <= k && n > best {
			best, v = n, ver
		}
	}
	return v
}

func (g *gitRepo) commitTime(rev string) (time.Time, bool) {
	out, err := g.run("log", "-1", "--no-show-signature", "--format=%ct", rev)
	if err != nil {
		return time.Time{}, false
	}
	s, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(s, 0).UTC(), true
}

// artifactOf maps a workspace path to an artifact kind and name.
func artifactOf(path string) (kind, name string, ok bool) {
	dir, rest, found := strings.Cut(path, "/")
	if !found || rest == "" {
		return "", "", false
	}
	switch dir {
	case "prompts":
		kind = schemas.KindPrompt
	case "skills":
		kind = schemas.KindSkill
		if skill, file, ok := strings.Cut(rest, "/"); ok && file == "SKILL.md" {
			return kind, skill, true
		}
	case "memory":
		kind = schemas.KindMemory
	case "tools":
		kind = schemas.KindTool
	default:
		return "", "", false
	}
	return kind, rest, true
}

// unfitArtifact says why content cannot be an artifact's content (the event
// contract's cap and UTF-8 text), or "".
func unfitArtifact(content string) string {
	if limit := schemas.DefaultLimits().ArtifactContent; len(content) > limit {
		return fmt.Sprintf("is %d bytes, over the %d-byte artifact cap", len(content), limit)
	}
	if !utf8.ValidString(content) {
		return "is not UTF-8 text"
	}
	return ""
}

// update builds the harness_update of evo-n from the diff from..evo-n. A
// changed file that cannot be an artifact (too large, not text: a long
// run's memory log, a binary) is left out of the update and reported in f,
// naming it, instead of failing the event and with it the whole import.
func (im *importer) update(c *cellState, g *gitRepo, from, to string, n int, f *FileReport) (*schemas.HarnessUpdate, string, error) {
	out, err := g.run("diff", "--no-ext-diff", "--no-textconv", "--name-status", "--no-renames", from, to)
	if err != nil {
		return nil, "", err
	}
	var arts []schemas.Artifact
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		st, path, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		kind, name, ok := artifactOf(path)
		if !ok {
			continue // manifest.yaml, evolution/ logs: not harness artifacts
		}
		a := schemas.Artifact{Kind: kind, Name: name}
		switch st[:1] {
		case "A":
			a.Op = schemas.OpAdd
		case "M", "T":
			a.Op = schemas.OpModify
		case "D":
			a.Op = schemas.OpRemove
		default:
			continue
		}
		if a.Op != schemas.OpRemove {
			limit := schemas.DefaultLimits().ArtifactContent
			content, over, err := g.runCap(limit+1, "cat-file", "blob", to+":"+path)
			if err != nil {
				return nil, "", err
			}
			why := unfitArtifact(content)
			if over {
				why = fmt.Sprintf("is over the %d-byte artifact cap", limit)
				if sz, err := g.run("cat-file", "-s", to+":"+path); err == nil {
					why = fmt.Sprintf("is %s bytes, over the %d-byte artifact cap", strings.TrimSpace(sz), limit)
				}
			}
			if why != "" {
				f.skip(fmt.Sprintf("artifact %s at %s %s: left out of its update", path, to, why))
				continue
			}
			a.Content = content
		}
		if a.Op != schemas.OpRemove { // a removal carries no content
			sum := sha256.Sum256([]byte(a.Content))
			a.ContentSHA256 = hex.EncodeToString(sum[:])
		}
		arts = append(arts, a)
	}
	if len(arts) == 0 {
		return nil, "empty diff", nil
	}
	return &schemas.HarnessUpdate{CellID: c.id, UpdateID: c.id + "/" + to, Cycle: int32(n),
		FromVersion: fmt.Sprintf("evo-%d", n-1), ToVersion: to, EvolverModel: c.evolver, Artifacts: arts, Accepted: true}, "", nil
}

// readVerdicts fills each update's accepted, rolled_back and evidence summary
// from workspace/evolution/unified_steps.jsonl.
func (im *importer) readVerdicts(c *cellState) {
	const rel = "workspace/evolution/unified_steps.jsonl"
	if !c.fs.exists(rel) {
		return
	}
	byCycle := map[int32]*schemas.HarnessUpdate{}
	for _, u := range c.updates {
		byCycle[u.Cycle] = u
	}
	f := &FileReport{Path: im.rel(c.fs.path(rel))}
	im.jsonl(c.fs, rel, f, func(m map[string]any) string {
		n, ok := number(m, "cycle")
		if !ok {
			return "no cycle"
		}
		u := byCycle[int32(n)]
		if u == nil {
			return "no update for cycle"
		}
		var parts []string
		if reps, ok := m["unified_reports"].([]any); ok {
			for _, r := range reps {
				if rm, ok := r.(map[string]any); ok {
					cnt, _ := number(rm, "count")
					part := fmt.Sprintf("%s×%d", str(rm, "operator_name"), int(cnt))
					if d, ok := rm["details"].(map[string]any); ok {
						for _, k := range []string{"skills_added", "skills_removed"} {
							if l, ok := d[k].([]any); ok && len(l) > 0 {
								names := make([]string, 0, len(l))
								for _, v := range l {
									names = append(names, fmt.Sprint(v))
								}
								part += fmt.Sprintf(" %s=[%s]", k, strings.Join(names, ","))
							}
						}
					}
					parts = append(parts, part)
				}
			}
		}
		if v, ok := m["unified_verdict"].(map[string]any); ok {
			if a, ok := boolean(v, "accept"); ok {
				u.Accepted = a
			}
			if r, ok := boolean(v, "rollback"); ok {
				u.RolledBack = r
			}
			if r := str(v, "reason"); r != "" {
				parts = append(parts, "verdict: "+r)
			}
		}
		if len(parts) > 0 {
			u.EvidenceSummary = truncate(strings.Join(parts, "; "), maxTaskInput)
		}
		return ""
	})
	im.file(f)
}
