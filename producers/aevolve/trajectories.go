package aevolve

import (
	"errors"
	"io/fs"
	"regexp"
	"strconv"

	"github.com/harnessflow/harnessflow/schemas"
)

// trajDir matches a trajectory directory, <task>__<cell>-cycle-<N>.
var trajDir = regexp.MustCompile(`^(.+)__(.+)-cycle-(\d+)$`)

// readTrajectories reads outputs/official_like/<task>__<cell>-cycle-<N>/agent/trajectory.json
// and turns the skill_tool_events of its steps into skill events.
func (im *importer) readTrajectories(c *cellState) {
	const root = "outputs/official_like"
	ents := c.fs.readDir(root)
	attShift, _ := strconv.Atoi(c.rep["_sb_attempt_shift"])
	for _, e := range ents {
		m := trajDir.FindStringSubmatch(e.Name())
		if m != nil && e.Type()&fs.ModeSymlink != 0 {
			im.sum.Refused++
			im.file(&FileReport{Path: im.rel(c.fs.path(root + "/" + e.Name())), Refused: "is a symbolic link: not followed, its skill events not imported"})
			continue
		}
		if m == nil || !e.IsDir() {
			continue
		}
		p := root + "/" + e.Name() + "/agent/trajectory.json"
		f := &FileReport{Path: im.rel(c.fs.path(p))}
		data, err := c.fs.readFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			f.skip("missing")
			im.file(f)
			continue
		} else if err != nil {
			im.refuse(f, err)
			im.file(f)
			continue
		}
		var doc any
		if err := parseLoose(data, &doc); err != nil {
			f.skip("unparseable")
			im.file(f)
			continue
		}
		var steps []any
		switch d := doc.(type) {
		case []any:
			steps = d
		case map[string]any:
			if s, ok := d["steps"].([]any); ok {
				steps = s
			} else {
				steps = []any{d}
			}
		}
		n, err := strconv.ParseInt(m[3], 10, 31)
		if err != nil || n+int64(attShift) > 1<<31-1 {
			f.skip("cycle out of range")
			im.file(f)
			continue
		}
		att := int32(n) + int32(attShift)
		turn := int32(0)
		for _, s := range steps {
			sm, ok := s.(map[string]any)
			if !ok {
				continue
			}
			evs, ok := sm["skill_tool_events"].([]any)
			if !ok {
				continue
			}
			for _, raw := range evs {
				ev, ok := raw.(map[string]any)
				if !ok {
					f.skip("not an object")
					continue
				}
				se := &schemas.SkillEvent{CellID: c.id, TaskID: m[1], Attempt: att, Turn: turn, Tool: str(ev, "tool"), SkillName: str(ev, "name")}
				switch se.Tool {
				case schemas.ToolListSkills:
					se.Status = schemas.SkillLoaded
					if found, ok := boolean(ev, "found"); ok && !found {
						se.Status = schemas.SkillNotFound
					}
				case schemas.ToolLoadSkill, schemas.ToolLoadSkillReference, schemas.ToolReadSkill:
					se.Status = str(ev, "status")
				default:
					f.skip("unknown tool")
					continue
				}
				if err := schemas.Validate(se, schemas.DefaultLimits()); err != nil {
					f.skip("invalid event (status " + se.Status + ")")
					continue
				}
				turn++
				c.skillEvents = append(c.skillEvents, se)
				f.Read++
			}
		}
		im.file(f)
	}
}
