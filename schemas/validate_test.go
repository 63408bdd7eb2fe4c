package schemas

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidateTypedEvents(t *testing.T) {
	t.Parallel()
	okAttempt := func() *TaskAttempt {
		return &TaskAttempt{CellID: "c", TaskID: "t", Attempt: 1, Status: StatusOK, Score: 0.5}
	}
	cases := []struct {
		name  string
		ev    Event
		lim   Limits
		code  string
		field string
		msg   string
	}{
		{"NaN score", func() Event { e := okAttempt(); e.Score = math.NaN(); return e }(), Limits{},
			CodeOutOfRange, "score", "task_attempt.score: NaN is outside [0,1]"},
		{"Inf score", func() Event { e := okAttempt(); e.Score = math.Inf(1); return e }(), Limits{},
			CodeOutOfRange, "score", "task_attempt.score: +Inf is outside [0,1]"},
		{"NaN phase", &AdherenceJudgment{CellID: "c", TaskID: "t", Attempt: 1, SkillName: "s", JudgeModel: "j", PreFinal: f64(math.NaN())}, Limits{},
			CodeOutOfRange, "pre_final", "adherence_judgment.pre_final: NaN is outside [0,1]"},
		{"NaN ci", &LabeledSample{SampleID: "s", UpdateID: "u", CellID: "c", CampaignID: "k", ArtifactKind: KindSkill, Label: LabelNeutral, Route: RouteInSitu, CILow: math.NaN()}, Limits{},
			CodeOutOfRange, "ci_low", "labeled_sample.ci_low: NaN is not a finite number"},
		{"NaN metric", &CheckpointPublished{ModelVersion: "m", Metrics: map[string]float64{"loss": math.NaN()}}, Limits{},
			CodeOutOfRange, "metrics.loss", "checkpoint_published.metrics.loss: NaN is not a finite number"},
		{"negative offset", &CheckpointPublished{ModelVersion: "m", Offsets: []TopicOffset{{Topic: "t", Offset: -1}}}, Limits{},
			CodeOutOfRange, "offsets[0].offset", "checkpoint_published.offsets[0].offset: -1 is negative"},
		{"empty enum", &CellFinished{CellID: "c"}, Limits{}, CodeMissingField, "status", `cell_finished: required field "status" is empty`},
		{"lift pp", &RoundMetrics{CellID: "c", LiftVsBaseline: f64(-101)}, Limits{}, CodeOutOfRange, "lift_vs_baseline", "round_metrics.lift_vs_baseline: -101 is outside [-100,100]"},
		{"pass rate", &RoundMetrics{CellID: "c", PassRate: 100.5}, Limits{}, CodeOutOfRange, "pass_rate", "round_metrics.pass_rate: 100.5 is outside [0,100]"},
		{"payload cap", &Rejected{Stage: StageLimit, ReasonCode: "x", Payload: make([]byte, 2000)}, Limits{Payload: 1000},
			CodeTooLarge, "payload", "rejected.payload: 2000 bytes, above the 1000-byte cap"},
		{"whole event", &Rejected{Stage: StageLimit, ReasonCode: "x", Message: strings.Repeat("m", 5000)}, Limits{Event: 1000},
			CodeTooLarge, "", "rejected: event is 5061 bytes, above the 1000-byte cap"},
		{"time range", &CellFinished{CellID: "c", Status: CellFailed, Envelope: Envelope{EventTime: time.UnixMilli(math.MaxInt64 / 2)}}, Limits{},
			CodeOutOfRange, "event_time", "cell_finished.event_time: year 146140482 is outside 1..9999"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.ev, c.lim)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v", err)
			}
			if fe.Code != c.code || fe.Field != c.field || err.Error() != c.msg {
				t.Fatalf("got code=%s field=%q msg=%q\nwant code=%s field=%q msg=%q", fe.Code, fe.Field, err.Error(), c.code, c.field, c.msg)
			}
		})
	}
}

func TestValidateEventCapIsEncodedSize(t *testing.T) {
	t.Parallel()
	ev := &Rejected{Stage: StageLimit, ReasonCode: "x", Message: strings.Repeat("m", 5000)}
	b, _ := Encode(ev)
	if len(b) != 5061 {
		t.Fatalf("encoded size %d, the whole-event case above expects 5061", len(b))
	}
	if err := Validate(ev, Limits{Event: len(b)}); err != nil {
		t.Fatalf("event exactly at the cap rejected: %v", err)
	}
}

func TestValidateAcceptsFixtures(t *testing.T) {
	t.Parallel()
	for _, ev := range allFixtures() {
		if err := Validate(ev, DefaultLimits()); err != nil {
			t.Errorf("%s: %v", ev.Type(), err)
		}
	}
	if err := Validate(nil, Limits{}); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("nil event: %v", err)
	}
}

// TestValidateAfterDecode: an Avro-decoded event with a NaN score decodes
// (Avro can carry it) and Validate rejects it.
func TestValidateAfterDecode(t *testing.T) {
	t.Parallel()
	b, err := Encode(&TaskAttempt{CellID: "c", TaskID: "t", Attempt: 1, Status: StatusOK, Score: math.NaN()})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(ev, DefaultLimits()); err == nil || err.Error() != "task_attempt.score: NaN is outside [0,1]" {
		t.Fatalf("Validate = %v", err)
	}
}
