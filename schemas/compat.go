package schemas

import (
	"encoding/json"
	"fmt"
	"slices"
)

// CheckCompatible reports whether data written with writerSchema can be read
// as readerSchema under Avro schema resolution, the rule every new schema
// version must follow (new fields only with defaults, only Avro's
// promotions, enum symbols only added). goavro itself cannot resolve a
// writer to a different reader; this package decodes old bytes with their own
// writer schema and maps fields by name (native.go), so this check and the
// golden-decode test together guard compatibility. It returns nil or an
// error naming the first incompatible field.
func CheckCompatible(readerSchema, writerSchema string) error {
	var r, w any
	if err := json.Unmarshal([]byte(readerSchema), &r); err != nil {
		return fmt.Errorf("reader schema: %w", err)
	}
	if err := json.Unmarshal([]byte(writerSchema), &w); err != nil {
		return fmt.Errorf("writer schema: %w", err)
	}
	return compatible("", r, w)
}

func typeName(s any) string {
	switch x := s.(type) {
	case string:
		return x
	case map[string]any:
		t, _ := x["type"].(string)
		return t
	case []any:
		return "union"
	}
	return ""
}

var promotions = map[string][]string{
	"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
	"string": {"bytes"}, "bytes": {"string"},
}

func compatible(path string, r, w any) error {
	rt, wt := typeName(r), typeName(w)
	if wt == "union" {
		for _, branch := range w.([]any) {
			if err := compatible(path, r, branch); err != nil {
				return err
			}
		}
		return nil
	}
	if rt == "union" {
		for _, branch := range r.([]any) {
			if compatible(path, branch, w) == nil {
				return nil
			}
		}
		return fmt.Errorf("%s: writer type %s matches no branch of the reader's union", path, wt)
	}
	if rt != wt && !slices.Contains(promotions[wt], rt) {
		return fmt.Errorf("%s: writer type %s cannot be read as %s", path, wt, rt)
	}
	rm, _ := r.(map[string]any)
	wm, _ := w.(map[string]any)
	switch rt {
	case "record":
		wf := map[string]any{}
		for _, f := range asList(wm["fields"]) {
			fm, _ := f.(map[string]any)
			name, _ := fm["name"].(string)
			wf[name] = fm["type"]
		}
		for _, f := range asList(rm["fields"]) {
			fm, _ := f.(map[string]any)
			name, _ := fm["name"].(string)
			wtyp, ok := wf[name]
			if !ok {
				if _, hasDefault := fm["default"]; !hasDefault {
					return fmt.Errorf("%s%s: new field without a default", dot(path), name)
				}
				continue
			}
			if err := compatible(dot(path)+name, fm["type"], wtyp); err != nil {
				return err
			}
		}
	case "enum":
		rs := asList(rm["symbols"])
		for _, s := range asList(wm["symbols"]) {
			if !slices.Contains(rs, s) {
				if _, hasDefault := rm["default"]; !hasDefault {
					return fmt.Errorf("%s: writer symbol %v removed", path, s)
				}
			}
		}
	case "array":
		return compatible(path+"[]", rm["items"], wm["items"])
	case "map":
		return compatible(path+"{}", rm["values"], wm["values"])
	}
	return nil
}

func asList(v any) []any { l, _ := v.([]any); return l }

func dot(path string) string {
	if path == "" {
		return ""
	}
	return path + "."
}
