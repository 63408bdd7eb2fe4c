package schemas

import (
	"errors"
	"strings"
	"testing"
)

// tooLong is one byte over the default cap on ids and names.
var tooLong = strings.Repeat("x", 257)

// expectTooLarge validates ev and wants a too_large FieldError on field.
func expectTooLarge(t *testing.T, ev Event, field string) {
	t.Helper()
	err := Validate(ev, DefaultLimits())
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Code != CodeTooLarge || fe.Field != field {
		t.Errorf("%s.%s of 257 bytes: Validate = %v, want a too_large error on %s", ev.Type(), field, err, field)
	}
}

func TestEveryIDAndNameFieldIsCapped(t *testing.T) {
	t.Parallel()
	for typ, ev := range fixturesV1() {
		ti := infos[typ]
		if err := Validate(ev, DefaultLimits()); err != nil {
			t.Fatalf("%s fixture: %v", typ, err)
		}
		for _, name := range []string{"event_id", "project", "source"} {
			e := fixturesV1()[typ]
			h := e.Header()
			switch name {
			case "event_id":
				h.EventID = tooLong
			case "project":
				h.Project = tooLong
			case "source":
				h.Source = tooLong
			}
			expectTooLarge(t, e, name)
		}
		for i := range ti.fields {
			f := &ti.fields[i]
			e := fixturesV1()[typ]
			switch {
			case (f.kind == kString || f.kind == kNullString) && f.capOf == nil && !f.prose:
				*f.str(e) = tooLong
				expectTooLarge(t, e, f.name)
			case f.kind == kStrings:
				*f.strs(e) = []string{"ok", tooLong}
				expectTooLarge(t, e, f.name+"[1]")
			case f.kind == kArtifacts:
				(*f.arts(e))[1].Name = tooLong
				expectTooLarge(t, e, f.name+"[1].name")
			case f.kind == kOffsets:
				(*f.offs(e))[0].Topic = tooLong
				expectTooLarge(t, e, f.name+"[0].topic")
			case f.kind == kMetrics:
				*f.mets(e) = map[string]float64{tooLong: 1}
				expectTooLarge(t, e, f.name+"."+tooLong)
			}
		}
	}
}

// TestNameCapList pins which string fields are free text (not capped as
// names): a new string field is an id or a name unless it is listed here.
func TestNameCapList(t *testing.T) {
	t.Parallel()
	var prose []string
	for _, typ := range AllTypes {
		for _, f := range infos[typ].fields {
			if (f.kind == kString || f.kind == kNullString) && (f.prose || f.capOf != nil) {
				prose = append(prose, string(typ)+"."+f.name)
			}
		}
	}
	want := "task_attempt.task_input harness_update.evidence_summary labeled_sample.query labeled_sample.update labeled_sample.reason rejected.message checkpoint_published.checkpoint_uri"
	if got := strings.Join(prose, " "); got != want {
		t.Fatalf("free-text fields:\n got %s\nwant %s", got, want)
	}
	if DefaultLimits().Name != DefaultNameCap || DefaultNameCap != 256 {
		t.Fatalf("name cap %d / %d, want 256", DefaultLimits().Name, DefaultNameCap)
	}
}

func TestNameCapAtTheLimitIsValid(t *testing.T) {
	t.Parallel()
	ev := fixturesV1()[TypeTaskAttempt].(*TaskAttempt)
	ev.CellID, ev.TaskID, ev.EventID = tooLong[:256], tooLong[:256], tooLong[:256]
	if err := Validate(ev, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	ev.CellID = tooLong
	if err := Validate(ev, Limits{Name: 300}); err != nil {
		t.Fatalf("Limits.Name 300: %v", err)
	}
}
