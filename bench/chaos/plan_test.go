package chaos

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/schemas"
)

// TestMalformedEventsAreUniqueAndDecodeToTheirReason checks the malformed
// messages against the decoder the processors and the sink use: each fails
// with the reason code the campaign expects in the DLQ, and no two payloads
// are equal (the DLQ is matched by payload).
func TestMalformedEventsAreUniqueAndDecodeToTheirReason(t *testing.T) {
	cfg := Config{Bin: "x", Seed: 7, Events: 3000, Tasks: 20, Rounds: 4, Evolvers: 2, MalformedFraction: 0.02}
	cfg.setDefaults()
	c := campaign(&cfg)
	msgs, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	bad := malformedEvents(&cfg, c, msgs)
	if want := int(0.02*float64(len(c.Records)) + 0.5); len(bad) != want {
		t.Fatalf("%d malformed events for %d good ones, want %d", len(bad), len(c.Records), want)
	}
	seen := map[string]bool{}
	kinds := map[string]int{}
	last := -1
	for i, m := range bad {
		if seen[string(m.Msg.Value)] {
			t.Fatalf("malformed %d (%s): payload repeated", i, m.Kind)
		}
		seen[string(m.Msg.Value)] = true
		kinds[m.Kind]++
		if m.After < last || m.After >= len(c.Records) {
			t.Fatalf("malformed %d: position %d after %d (of %d)", i, m.After, last, len(c.Records))
		}
		last = m.After
		ev, err := schemas.Decode(m.Msg.Value)
		if err == nil {
			t.Fatalf("malformed %d (%s) decodes to a %s", i, m.Kind, ev.Type())
		}
		var fe *schemas.FieldError
		if !errors.As(err, &fe) || fe.Code != m.Reason {
			t.Fatalf("malformed %d (%s): decode error %v, want reason %s", i, m.Kind, err, m.Reason)
		}
	}
	for _, k := range malformedKinds {
		if kinds[k.kind] == 0 {
			t.Errorf("no malformed event of kind %s", k.kind)
		}
	}
	again := malformedEvents(&cfg, c, msgs)
	if !reflect.DeepEqual(bad, again) {
		t.Fatal("the same seed gave other malformed events")
	}
}

// TestPlanIsSeededAndComplete checks that the plan holds every fault the
// config asks for, within the stream, and that a seed replays it.
func TestPlanIsSeededAndComplete(t *testing.T) {
	cfg := Config{Bin: "x", Seed: 42}
	cfg.setDefaults()
	plan := planFaults(&cfg)
	got := planned(plan)
	want := map[string]int{
		FaultKillProcessors: 5, FaultKillSink: 5, FaultKillTrainer: 5, FaultBrokerRestart: 1, FaultClickHouseOutage: 1,
		FaultProduceError: 2, FaultFetchError: 2, FaultNotLeader: 2, FaultTimeout: 2,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan has %v, want %v", got, want)
	}
	for i, f := range plan {
		if f.At < 0.05 || f.At > 0.95 || (i > 0 && f.At < plan[i-1].At) {
			t.Fatalf("fault %d at %v: outside [0.05, 0.95] or out of order", i, f.At)
		}
		if f.Downtime < 0 || f.Downtime > cfg.MaxDowntime {
			t.Fatalf("fault %d: downtime %v", i, f.Downtime)
		}
	}
	if !reflect.DeepEqual(plan, planFaults(&cfg)) {
		t.Fatal("the same seed gave another plan")
	}
	cfg.Seed = 43
	if reflect.DeepEqual(plan, planFaults(&cfg)) {
		t.Fatal("another seed gave the same plan")
	}
	cfg.Kills, cfg.KafkaBursts = -1, -1
	if got := planned(planFaults(&cfg)); got[FaultKillSink] != 0 || got[FaultNotLeader] != 0 || got[FaultBrokerRestart] != 1 {
		t.Fatalf("negative counts disable faults: %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	var cfg Config
	cfg.Rate = -1
	cfg.setDefaults()
	err := cfg.Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate of a config without Bin and with a negative rate: %v", err)
	}
	for _, want := range []string{"binary", "rate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q does not mention %q", err, want)
		}
	}
}
