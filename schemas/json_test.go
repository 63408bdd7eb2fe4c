package schemas

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const validAttempt = `{"type":"task_attempt","cell_id":"c1","task_id":"t1","attempt":1,"cycle":0,"status":"ok","score":0.5,"success":true`

// TestParseJSONErrors asserts the exact error, code and field for each class
// of invalid JSON input.
func TestParseJSONErrors(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 70<<10)
	cases := []struct {
		name, in string
		lim      Limits
		code     string
		field    string
		msg      string
	}{
		{"not json", `{"type":`, Limits{}, CodeMalformed, "", "invalid JSON: unexpected end of JSON input"},
		{"not object", `[1]`, Limits{}, CodeMalformed, "", "invalid JSON: json: cannot unmarshal array into Go value of type map[string]json.RawMessage"},
		{"null", `null`, Limits{}, CodeMalformed, "", "not a JSON object"},
		{"no type", `{"cell_id":"c"}`, Limits{}, CodeMissingField, "type", `missing required field "type"`},
		{"type not string", `{"type":7}`, Limits{}, CodeWrongType, "type", "type: want string, got number 7"},
		{"unknown type", `{"type":"task_attemptz"}`, Limits{}, CodeUnknownType, "type", `type: "task_attemptz" is not a known event type`},
		{"unknown field", validAttempt + `,"scores":1}`, Limits{}, CodeUnknownField, "scores", `task_attempt: unknown field "scores"`},
		{"missing field", `{"type":"task_attempt","cell_id":"c1","attempt":1,"status":"ok","score":0.5,"success":true}`, Limits{},
			CodeMissingField, "task_id", `task_attempt: missing required field "task_id"`},
		{"empty required", `{"type":"task_attempt","cell_id":"","task_id":"t","attempt":1,"status":"ok","score":0.5,"success":true}`, Limits{},
			CodeMissingField, "cell_id", `task_attempt: required field "cell_id" is empty`},
		{"string for int", validAttempt + `,"stream_idx":"3"}`, Limits{}, CodeWrongType, "stream_idx", `task_attempt.stream_idx: want integer, got string "3"`},
		{"float for int", validAttempt + `,"stream_idx":1.5}`, Limits{}, CodeWrongType, "stream_idx", `task_attempt.stream_idx: want integer, got number 1.5`},
		{"exponent for int", validAttempt + `,"input_tokens":1e3}`, Limits{}, CodeWrongType, "input_tokens", `task_attempt.input_tokens: want integer, got number 1e3`},
		{"int overflow", validAttempt + `,"stream_idx":2147483648}`, Limits{}, CodeOutOfRange, "stream_idx", `task_attempt.stream_idx: 2147483648 is outside the int range`},
		{"number for bool", validAttempt + `,"final":1}`, Limits{}, CodeWrongType, "final", `task_attempt.final: want boolean, got number 1`},
		{"null for string", `{"type":"cell_finished","cell_id":null,"status":"failed"}`, Limits{}, CodeWrongType, "cell_id", `cell_finished.cell_id: want string, got null null`},
		{"bad time", validAttempt + `,"event_time":"yesterday"}`, Limits{}, CodeWrongType, "event_time", `task_attempt.event_time: want RFC 3339 time or epoch milliseconds, got string "yesterday"`},
		{"bad enum", `{"type":"cell_started","campaign_id":"k","cell_id":"c","benchmark":"b","agent_model":"a","route":"sideways"}`, Limits{},
			CodeBadEnum, "route", `cell_started.route: "sideways" is not one of baseline, in_situ, split_train, split_test, production`},
		{"bad status", `{"type":"task_attempt","cell_id":"c1","task_id":"t1","attempt":1,"status":"fine","score":0.5,"success":true}`, Limits{},
			CodeBadEnum, "status", `task_attempt.status: "fine" is not one of ok, error, interrupted, timeout`},
		{"bad tool", `{"type":"skill_event","cell_id":"c","task_id":"t","attempt":1,"turn":0,"tool":"run","status":"loaded"}`, Limits{},
			CodeBadEnum, "tool", `skill_event.tool: "run" is not one of list_skills, load_skill, load_skill_reference, read_skill`},
		{"bad skill status", `{"type":"skill_event","cell_id":"c","task_id":"t","attempt":1,"turn":0,"tool":"read_skill","status":"ok"}`, Limits{},
			CodeBadEnum, "status", `skill_event.status: "ok" is not one of loaded, not_found, rejected_multikey`},
		{"bad artifact kind", `{"type":"harness_update","cell_id":"c","update_id":"u","from_version":"a","to_version":"b","artifacts":[{"kind":"poem","name":"n","op":"add"}]}`, Limits{},
			CodeBadEnum, "artifacts[0].kind", `harness_update.artifacts[0].kind: "poem" is not one of prompt, skill, memory, tool`},
		{"bad artifact op", `{"type":"harness_update","cell_id":"c","update_id":"u","from_version":"a","to_version":"b","artifacts":[{"kind":"tool","name":"n","op":"delete"}]}`, Limits{},
			CodeBadEnum, "artifacts[0].op", `harness_update.artifacts[0].op: "delete" is not one of add, modify, remove`},
		{"artifact unknown field", `{"type":"harness_update","cell_id":"c","update_id":"u","from_version":"a","to_version":"b","artifacts":[{"kind":"tool","name":"n","op":"add","size":1}]}`, Limits{},
			CodeUnknownField, "artifacts[0].size", `harness_update: unknown field "artifacts[0].size"`},
		{"artifact missing name", `{"type":"harness_update","cell_id":"c","update_id":"u","from_version":"a","to_version":"b","artifacts":[{"kind":"tool","op":"add"}]}`, Limits{},
			CodeMissingField, "artifacts[0].name", `harness_update: missing required field "artifacts[0].name"`},
		{"bad cell status", `{"type":"cell_finished","cell_id":"c","status":"done"}`, Limits{},
			CodeBadEnum, "status", `cell_finished.status: "done" is not one of completed, failed, aborted`},
		{"bad label", `{"type":"labeled_sample","sample_id":"s","update_id":"u","cell_id":"c","campaign_id":"k","artifact_kind":"skill","effect":0.1,"label":"good","route":"in_situ"}`, Limits{},
			CodeBadEnum, "label", `labeled_sample.label: "good" is not one of negative, neutral, positive`},
		{"bad stage", `{"type":"rejected","stage":"late","reason_code":"x"}`, Limits{},
			CodeBadEnum, "stage", `rejected.stage: "late" is not one of decode, syntax, semantic, reference, limit`},
		{"score above 1", `{"type":"task_attempt","cell_id":"c1","task_id":"t1","attempt":1,"status":"ok","score":1.5,"success":true}`, Limits{},
			CodeOutOfRange, "score", `task_attempt.score: 1.5 is outside [0,1]`},
		{"score below 0", `{"type":"task_attempt","cell_id":"c1","task_id":"t1","attempt":1,"status":"ok","score":-0.1,"success":true}`, Limits{},
			CodeOutOfRange, "score", `task_attempt.score: -0.1 is outside [0,1]`},
		{"effect", `{"type":"labeled_sample","sample_id":"s","update_id":"u","cell_id":"c","campaign_id":"k","artifact_kind":"skill","effect":1.01,"label":"positive","route":"in_situ"}`, Limits{},
			CodeOutOfRange, "effect", `labeled_sample.effect: 1.01 is outside [-1,1]`},
		{"p value", `{"type":"labeled_sample","sample_id":"s","update_id":"u","cell_id":"c","campaign_id":"k","artifact_kind":"skill","effect":0,"label":"neutral","route":"in_situ","p_value":2}`, Limits{},
			CodeOutOfRange, "p_value", `labeled_sample.p_value: 2 is outside [0,1]`},
		{"phase score", `{"type":"adherence_judgment","cell_id":"c","task_id":"t","attempt":1,"skill_name":"s","judge_model":"j","midpoint":1.2}`, Limits{},
			CodeOutOfRange, "midpoint", `adherence_judgment.midpoint: 1.2 is outside [0,1]`},
		{"epsilon", `{"type":"campaign_declared","campaign_id":"k","label_epsilon":1}`, Limits{}, CodeOutOfRange, "label_epsilon", `campaign_declared.label_epsilon: 1 is outside [0,1)`},
		{"alpha", `{"type":"campaign_declared","campaign_id":"k","label_alpha":0}`, Limits{}, CodeOutOfRange, "label_alpha", `campaign_declared.label_alpha: 0 is outside (0,1)`},
		{"negative tokens", validAttempt + `,"input_tokens":-5}`, Limits{}, CodeOutOfRange, "input_tokens", `task_attempt.input_tokens: -5 is negative`},
		{"negative duration", validAttempt + `,"duration_ms":-1}`, Limits{}, CodeOutOfRange, "duration_ms", `task_attempt.duration_ms: -1 is negative`},
		{"attempt 0", `{"type":"task_attempt","cell_id":"c1","task_id":"t1","attempt":0,"status":"ok","score":0.5,"success":true}`, Limits{},
			CodeOutOfRange, "attempt", `task_attempt.attempt: 0 is below 1`},
		{"negative judgment count", `{"type":"adherence_judgment","cell_id":"c","task_id":"t","attempt":1,"skill_name":"s","judge_model":"j","followed":-2}`, Limits{},
			CodeOutOfRange, "followed", `adherence_judgment.followed: -2 is negative`},
		{"negative batch size", `{"type":"cell_started","campaign_id":"k","cell_id":"c","benchmark":"b","agent_model":"a","route":"baseline","batch_size":-8}`, Limits{},
			CodeOutOfRange, "batch_size", `cell_started.batch_size: -8 is negative`},
		{"task input cap", validAttempt + `,"task_input":"` + big + `"}`, Limits{},
			CodeTooLarge, "task_input", `task_attempt.task_input: 71680 bytes, above the 65536-byte cap`},
		{"artifact content cap", `{"type":"harness_update","cell_id":"c","update_id":"u","from_version":"a","to_version":"b","artifacts":[{"kind":"tool","name":"n","op":"add","content":"` + big + `"}]}`,
			Limits{ArtifactContent: 1024}, CodeTooLarge, "artifacts[0].content", `harness_update.artifacts[0].content: 71680 bytes, above the 1024-byte cap`},
		{"whole event cap", validAttempt + `,"task_input":"` + big + `"}`, Limits{Event: 4096},
			CodeTooLarge, "", `event is 71812 bytes, above the 4096-byte cap`},
		{"payload not base64", `{"type":"rejected","stage":"decode","reason_code":"x","payload":"@@"}`, Limits{},
			CodeMalformed, "payload", `rejected.payload: not standard base64: illegal base64 data at input byte 0`},
		{"bad sha", `{"type":"harness_update","cell_id":"c","update_id":"u","from_version":"a","to_version":"b","artifacts":[{"kind":"tool","name":"n","op":"add","content_sha256":"xyz"}]}`, Limits{},
			CodeMalformed, "artifacts[0].content_sha256", `harness_update.artifacts[0].content_sha256: "xyz" is not 64 lowercase hex digits`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := ParseJSON([]byte(c.in), c.lim)
			if ev != nil || err == nil {
				t.Fatalf("ParseJSON accepted %s", c.in[:min(len(c.in), 120)])
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if fe.Code != c.code || fe.Field != c.field || fe.Error() != c.msg {
				t.Fatalf("got code=%s field=%q msg=%q\nwant code=%s field=%q msg=%q", fe.Code, fe.Field, fe.Error(), c.code, c.field, c.msg)
			}
			if err.Error() != c.msg {
				t.Fatalf("more errors than expected: %v", err)
			}
		})
	}
}

func TestParseJSONSentinels(t *testing.T) {
	t.Parallel()
	if _, err := ParseJSON([]byte(`{"type":"x"}`), Limits{}); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("unknown type does not wrap ErrUnknownType: %v", err)
	}
	if _, err := ParseJSON([]byte(`{`), Limits{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad JSON does not wrap ErrMalformed: %v", err)
	}
}

func TestParseJSONJoinsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := ParseJSON([]byte(`{"type":"task_attempt","cell_id":"c","zz":1,"aa":2,"attempt":"1","status":"ok","score":0.5}`), Limits{})
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		got = append(got, e.Error())
	}
	want := []string{
		`task_attempt: unknown field "aa"`, `task_attempt: unknown field "zz"`,
		`task_attempt: missing required field "task_id"`, `task_attempt.attempt: want integer, got string "1"`,
		`task_attempt: missing required field "success"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseJSONDefaultsAndForms(t *testing.T) {
	t.Parallel()
	ev, err := ParseJSON([]byte(`{"type":"campaign_declared","campaign_id":"k","benchmarks":null}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c := ev.(*CampaignDeclared)
	if c.LabelEpsilon != 0.02 || c.LabelAlpha != 0.05 || c.Benchmarks != nil {
		t.Fatalf("defaults: %+v", c)
	}
	if c.EventID != DeriveEventID(c) || c.EventID == "" {
		t.Fatalf("event_id not derived: %q", c.EventID)
	}
	// event_time as epoch millis and as RFC 3339 with an offset: same instant, UTC, ms.
	a, err := ParseJSON([]byte(validAttempt+`,"event_time":1741964966535,"evolver_model":null}`), Limits{})
	if err == nil {
		t.Fatal("evolver_model is not a task_attempt field")
	}
	a, err = ParseJSON([]byte(validAttempt+`,"event_time":1741964966535}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseJSON([]byte(validAttempt+`,"event_time":"2025-03-14T16:09:26.535999+01:00"}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Header().EventTime.Equal(fixtureTime) || a.Header().EventTime != b.Header().EventTime || b.Header().EventTime.Location() != time.UTC {
		t.Fatalf("times %v %v, want %v", a.Header().EventTime, b.Header().EventTime, fixtureTime)
	}
	// Baseline cell: evolver_model null or absent.
	for _, s := range []string{`,"evolver_model":null`, ``} {
		ev, err := ParseJSON([]byte(`{"type":"cell_started","campaign_id":"k","cell_id":"c","benchmark":"b","agent_model":"a","route":"baseline"`+s+`}`), Limits{})
		if err != nil || ev.(*CellStarted).EvolverModel != "" {
			t.Fatalf("baseline %q: %v %v", s, ev, err)
		}
	}
	j, _ := MarshalJSON(&CellStarted{CampaignID: "k", CellID: "c", Benchmark: "b", AgentModel: "a", Route: RouteBaseline})
	if !strings.Contains(string(j), `"evolver_model":null`) || !strings.Contains(string(j), `"event_time":null`) {
		t.Fatalf("MarshalJSON: %s", j)
	}
	j, _ = MarshalJSON(fixturesV1()[TypeTaskAttempt])
	if !strings.Contains(string(j), `"event_time":"2025-03-14T15:09:26.535Z"`) || !strings.HasPrefix(string(j), `{"type":"task_attempt","event_id":"ev-attempt"`) {
		t.Fatalf("MarshalJSON: %s", j)
	}
}

// TestParseJSONFinalDefaultsToTrue: an attempt that does not say final is
// its task's last (the one pass_rate_final reads), as on OTLP; final:
// false and final: true are kept; the written form always carries it, so
// a false survives a round trip.
func TestParseJSONFinalDefaultsToTrue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		extra string
		want  bool
	}{{"}", true}, {`,"final":false}`, false}, {`,"final":true}`, true}} {
		ev, err := ParseJSON([]byte(validAttempt+c.extra), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ev.(*TaskAttempt).Final; got != c.want {
			t.Errorf("%s: final %v, want %v", validAttempt+c.extra, got, c.want)
		}
		j, err := MarshalJSON(ev)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseJSON(j, Limits{})
		if err != nil || back.(*TaskAttempt).Final != c.want {
			t.Errorf("round trip of %s: %v, %v", j, back, err)
		}
	}
}

func TestMarshalJSONRejectsNaN(t *testing.T) {
	t.Parallel()
	_, err := MarshalJSON(&TaskAttempt{CellID: "c", TaskID: "t", Attempt: 1, Status: StatusOK, Score: math.NaN()})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "score" || fe.Code != CodeOutOfRange {
		t.Fatalf("NaN: %v", err)
	}
}

func TestJSONStringEscaping(t *testing.T) {
	t.Parallel()
	s := "a\"b\\c\n\t\x00\x1f\u2028é\xff"
	ev := &CellFinished{CellID: s, Status: CellFailed}
	j, err := MarshalJSON(ev)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseJSON(j, Limits{})
	if err != nil || back.(*CellFinished).CellID != strings.TrimSuffix(s, "\xff")+"\ufffd" {
		t.Fatalf("invalid UTF-8 not replaced by U+FFFD: %s %v", j, err)
	}
	if err := Validate(ev, Limits{}); err == nil || !strings.Contains(err.Error(), "cell_finished.cell_id: invalid UTF-8") {
		t.Fatalf("Validate of invalid UTF-8: %v", err)
	}
	ev.CellID = strings.TrimSuffix(s, "\xff")
	j, _ = MarshalJSON(ev)
	back, err = ParseJSON(j, Limits{})
	if err != nil || back.(*CellFinished).CellID != ev.CellID {
		t.Fatalf("escaped string did not round trip: %s %v", j, err)
	}
}

// TestParseJSONWithDerivesTheProjectsID: an event without event_id or
// project, parsed for a project (a gateway's token), gets that project and
// the id DeriveEventID gives it there; one naming its project keeps it.
func TestParseJSONWithDerivesTheProjectsID(t *testing.T) {
	t.Parallel()
	const body = `{"type":"cell_finished","cell_id":"c1","status":"completed","attempts":1}`
	a, err := ParseJSONWith([]byte(body), Limits{}, Envelope{Project: "acme", Source: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseJSONWith([]byte(body), Limits{}, Envelope{Project: "evil", Source: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Header().Project != "acme" || a.Header().Source != "gw" || a.Header().EventID != DeriveEventID(a) {
		t.Errorf("parsed for acme: %+v", *a.Header())
	}
	if a.Header().EventID == b.Header().EventID {
		t.Error("two projects' events without ids got one id")
	}
	c, err := ParseJSONWith([]byte(`{"type":"cell_finished","project":"own","cell_id":"c1","status":"completed","attempts":1}`), Limits{}, Envelope{Project: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Header().Project != "own" {
		t.Errorf("the event's own project was replaced: %q", c.Header().Project)
	}
}
