package aevolve

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/harnessflow/harnessflow/schemas"
)

// trajDir matches a trajectory directory, <task>__<cell>-cycle-<N>.
var trajDir = regexp.MustCompile(`^(.+)__(.+)-cycle-(\d+)$`)

// readTrajectories reads outputs/official_like/<task>__<cell>-cycle-<N>/agent/trajectory.json
// and turns the skill_tool_events of its steps into skill events.
func (im *importer) readTrajectories(c *cellState) {
	root := filepath.Join(c.dir, "outputs", "official_like")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	attShift, _ := strconv.Atoi(c.rep["_sb_attempt_shift"])
	for _, e := range ents {
		m := trajDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		p := filepath.Join(root, e.Name(), "agent", "trajectory.json")
		f := &FileReport{Path: im.rel(p)}
		data, err := os.ReadFile(p)
		if err != nil {
			f.skip("missing")
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
		n, _ := strconv.Atoi(m[3])
		att := int32(n + attShift)
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
