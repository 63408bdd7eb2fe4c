package producers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/infra/kafkatopics"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
)

// bigUpdate returns a valid harness_update whose skill artifacts hold
// contents of the given sizes.
func bigUpdate(id string, sizes ...int) *schemas.HarnessUpdate {
	u := &schemas.HarnessUpdate{Envelope: schemas.Envelope{EventID: id, EventTime: time.Now().UTC().Truncate(time.Millisecond),
		Project: "p", Source: "test"}, CellID: "c-big", UpdateID: id, Cycle: 1, FromVersion: "h0", ToVersion: "h1",
		EvolverModel: "e", EvidenceTaskIDs: []string{"t-1"}, Accepted: true}
	for i, n := range sizes {
		name := "skill-" + string(rune('a'+i))
		c := gen.SkillContent(name, "")
		c += strings.Repeat("x", n-len(c))
		u.Artifacts = append(u.Artifacts, schemas.Artifact{Kind: schemas.KindSkill, Name: name, Op: schemas.OpAdd,
			Content: c, ContentSHA256: gen.SHA256(c)})
	}
	return u
}

// TestEventsAtTheCapsAreDelivered: every valid event is deliverable with the
// default configuration: a ~900 KB skill artifact (the import of A-Evolve
// runs emits such updates), and an event at the 4 MiB event cap less 1 KiB.
// With the old 1000000-byte default batch the first was refused by Emit
// (too_large) and the second could never be sent.
func TestEventsAtTheCapsAreDelivered(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx := ctxT(t, 60*time.Second)
	lim := schemas.DefaultLimits()
	art := bigUpdate("u-900k", 900_000)
	part := lim.ArtifactContent - 64
	full := bigUpdate("u-4m", part, part, part, part)
	enc, err := schemas.Encode(full)
	if err != nil {
		t.Fatal(err)
	}
	// Grow the last artifact to 1 KiB under the event cap.
	a := &full.Artifacts[3]
	for pad := lim.Event - 1024 - len(enc); pad != 0; pad = lim.Event - 1024 - len(enc) {
		if pad > 0 {
			a.Content += strings.Repeat("y", pad)
		} else {
			a.Content = a.Content[:len(a.Content)+pad]
		}
		if enc, err = schemas.Encode(full); err != nil {
			t.Fatal(err)
		}
	}
	a.ContentSHA256 = gen.SHA256(a.Content)
	if enc, _ = schemas.Encode(full); len(enc) != lim.Event-1024 {
		t.Fatalf("event of %d bytes, want %d", len(enc), lim.Event-1024)
	}
	for _, ev := range []schemas.Event{art, full} {
		if err := schemas.Validate(ev, lim); err != nil {
			t.Fatalf("%s: %v", ev.Header().EventID, err)
		}
	}
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for _, ev := range []schemas.Event{art, full} {
		if err := p.Emit(ctx, ev); err != nil {
			t.Fatalf("emit %s: %v", ev.Header().EventID, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	got, _ := readBack(t, ctx, b.Addr())
	for _, ev := range []schemas.Event{art, full} {
		g, ok := got[ev.Header().EventID]
		if !ok || jsonForm(t, g) != jsonForm(t, ev) {
			t.Fatalf("event %s not delivered intact", ev.Header().EventID)
		}
	}
}

// TestBatchBytesAgreeWithTheCaps: the default batch holds an event at the
// schemas event cap and stays under the topics' max.message.bytes.
func TestBatchBytesAgreeWithTheCaps(t *testing.T) {
	t.Parallel()
	d := producers.DefaultConfig()
	if d.BatchBytes < int64(schemas.DefaultLimits().Event)+1024 {
		t.Errorf("default batch bytes %d, below the %d-byte event cap", d.BatchBytes, schemas.DefaultLimits().Event)
	}
	if d.BatchBytes > kafkatopics.MaxMessageBytes-64<<10 {
		t.Errorf("default batch bytes %d, not under max.message.bytes %d", d.BatchBytes, kafkatopics.MaxMessageBytes)
	}
	for _, tp := range kafkatopics.All() {
		if tp.Configs["max.message.bytes"] != "8388608" {
			t.Errorf("%s: max.message.bytes %q", tp.Name, tp.Configs["max.message.bytes"])
		}
	}
}
