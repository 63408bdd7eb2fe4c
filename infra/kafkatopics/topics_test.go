package kafkatopics_test

import (
	"slices"
	"testing"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/schemas"
)

// TestOneDefinitionPerTopic checks that the topic names (schemas) and their
// settings (this package) describe the same topics: every topic an event
// type is produced to, and the internal hf.outcomes, is defined exactly
// once, nothing else is, and the raw class is what producers write.
func TestOneDefinitionPerTopic(t *testing.T) {
	want := []string{schemas.TopicOutcomes}
	for _, typ := range schemas.AllTypes {
		name := schemas.TopicFor(typ)
		if name == "" {
			t.Fatalf("event type %s has no topic", typ)
		}
		if !slices.Contains(want, name) {
			want = append(want, name)
		}
	}
	got := kafkatopics.Names()
	slices.Sort(want)
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if !slices.Equal(sorted, want) {
		t.Fatalf("defined topics %v, the event contract's %v", sorted, want)
	}
	if len(slices.Compact(sorted)) != len(got) {
		t.Fatalf("a topic is defined twice: %v", got)
	}
	var raw []string
	for _, d := range kafkatopics.All() {
		if d.Class == kafkatopics.Raw {
			raw = append(raw, d.Name)
		}
		if d.Partitions < 1 || d.ReplicationFactor < 1 || d.Configs["cleanup.policy"] == "" {
			t.Errorf("%s: incomplete definition %+v", d.Name, d)
		}
		if got, ok := kafkatopics.Lookup(d.Name); !ok || got.Name != d.Name {
			t.Errorf("Lookup(%s) = %+v, %v", d.Name, got, ok)
		}
	}
	if !slices.Equal(raw, schemas.RawTopics) {
		t.Fatalf("raw class %v, schemas.RawTopics %v", raw, schemas.RawTopics)
	}
}
