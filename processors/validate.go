package processors

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/harnessflow/harnessflow/schemas"
)

// decodeRejection classifies an error of schemas.Decode that left no event.
func decodeRejection(err error) *rejection {
	code := schemas.CodeMalformed
	var fe *schemas.FieldError
	switch {
	case errors.Is(err, schemas.ErrUnknownFingerprint):
		code = schemas.CodeUnknownFingerprint
	case errors.Is(err, schemas.ErrUnknownType):
		code = schemas.CodeUnknownType
	case errors.As(err, &fe) && fe.Code != "":
		code = fe.Code
	}
	if code == schemas.CodeSchemaRegistry {
		return reject(schemas.StageDecode, code, "%v (start the processors with --schema-registry)", err)
	}
	return reject(schemas.StageDecode, code, "%v", err)
}

// syntaxRejection turns a schemas.Validate error (errors.Join of
// *schemas.FieldError) into a syntax-stage rejection carrying the first
// problem's code and every problem's message.
func syntaxRejection(err error) *rejection {
	code := schemas.CodeMalformed
	var fe *schemas.FieldError
	if errors.As(err, &fe) && fe.Code != "" {
		code = fe.Code
	}
	return reject(schemas.StageSyntax, code, "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
}

// checkSyntax runs the decode-independent syntax rules: the event belongs on
// topic, schemas.Validate, and the artifact rules of harness updates.
func checkSyntax(topic string, ev schemas.Event, lim schemas.Limits) *rejection {
	if want := schemas.TopicFor(ev.Type()); want != topic {
		return reject(schemas.StageSyntax, CodeWrongTopic, "%s %q read from %s, belongs on %s", ev.Type(), ev.Header().EventID, topic, want)
	}
	if err := schemas.Validate(ev, lim); err != nil {
		return syntaxRejection(err)
	}
	if u, ok := ev.(*schemas.HarnessUpdate); ok {
		return checkArtifacts(u)
	}
	return nil
}

// checkArtifacts checks every artifact of an update: the content hash, a
// skill's front matter and a tool registry's shape. Removals carry no content
// and are not checked.
func checkArtifacts(u *schemas.HarnessUpdate) *rejection {
	for i := range u.Artifacts {
		a := &u.Artifacts[i]
		if a.Op == schemas.OpRemove {
			continue
		}
		if a.ContentSHA256 != "" && !strings.EqualFold(a.ContentSHA256, contentHash(a.Content)) {
			return reject(schemas.StageSyntax, CodeContentHashMismatch,
				"artifact %q (%s): content_sha256 %s is not the sha256 of its content (%s)",
				a.Name, a.Kind, a.ContentSHA256, contentHash(a.Content))
		}
		switch a.Kind {
		case schemas.KindSkill:
			if err := checkFrontMatter(a.Content); err != "" {
				return reject(schemas.StageSyntax, CodeBadFrontMatter, "skill %q: %s", a.Name, err)
			}
		case schemas.KindTool:
			if err := checkToolRegistry(a.Content); err != "" {
				return reject(schemas.StageSyntax, CodeBadToolRegistry, "tool registry %q: %s", a.Name, err)
			}
		}
	}
	return nil
}

// contentHash is the hex sha256 of content.
func contentHash(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:])
}

// artifactHash is the artifact's content hash: its content_sha256, or the
// hash of its content when the producer left it empty.
func artifactHash(a *schemas.Artifact) string {
	if a.ContentSHA256 != "" {
		return strings.ToLower(a.ContentSHA256)
	}
	return contentHash(a.Content)
}

// checkFrontMatter checks a SKILL.md: the content starts with a "---" line,
// YAML follows up to the next "---" line, and it is a mapping with non-empty
// string "name" and "description". It returns "" or what is wrong.
func checkFrontMatter(content string) string {
	content = strings.TrimPrefix(content, "\ufeff")
	rest, ok := cutLine(content, "---")
	if !ok {
		return `content does not start with a "---" front matter line`
	}
	var yml strings.Builder
	closed := false
	for rest != "" {
		line, tail, _ := strings.Cut(rest, "\n")
		rest = tail
		if strings.TrimRight(line, " \t\r") == "---" {
			closed = true
			break
		}
		yml.WriteString(line)
		yml.WriteByte('\n')
	}
	if !closed {
		return `front matter is not closed by a "---" line`
	}
	var fm map[string]any
	if err := yaml.Unmarshal([]byte(yml.String()), &fm); err != nil {
		return "front matter is not YAML: " + firstLine(err.Error())
	}
	var missing []string
	for _, k := range []string{"name", "description"} {
		v, ok := fm[k].(string)
		if !ok || strings.TrimSpace(v) == "" {
			missing = append(missing, `"`+k+`"`)
		}
	}
	if len(missing) > 0 {
		return "front matter lacks " + strings.Join(missing, " and ")
	}
	return ""
}

// cutLine removes a first line equal to want (ignoring trailing blanks).
func cutLine(s, want string) (string, bool) {
	line, rest, _ := strings.Cut(s, "\n")
	if strings.TrimRight(line, " \t\r") != want {
		return s, false
	}
	return rest, true
}

// checkToolRegistry checks a tool registry: a YAML (or JSON) mapping with a
// non-empty "tools" list whose entries are mappings with a non-empty string
// "name". It returns "" or what is wrong.
func checkToolRegistry(content string) string {
	var reg map[string]any
	if err := yaml.Unmarshal([]byte(content), &reg); err != nil {
		return "not a YAML mapping: " + firstLine(err.Error())
	}
	tools, ok := reg["tools"].([]any)
	if !ok {
		return `lacks a "tools" list`
	}
	if len(tools) == 0 {
		return `"tools" is empty`
	}
	for i, t := range tools {
		m, ok := t.(map[string]any)
		if !ok {
			return "tools[" + itoa(i) + "] is not a mapping"
		}
		if n, ok := m["name"].(string); !ok || strings.TrimSpace(n) == "" {
			return "tools[" + itoa(i) + `] lacks a "name"`
		}
	}
	return ""
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
