package producers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/producerstest"
)

// TestDerivedTypesNeedWithInternalTypes: Emit and EmitSync refuse the
// pipeline's derived types with an error naming the type (ErrInternalType,
// ErrInvalidEvent); a Producer made WithInternalTypes emits them.
func TestDerivedTypesNeedWithInternalTypes(t *testing.T) {
	t.Parallel()
	b := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for i, typ := range producerstest.DerivedTypes {
		err := p.Emit(ctx, producerstest.Derived(typ, i, "p"))
		if !errors.Is(err, producers.ErrInternalType) || !errors.Is(err, producers.ErrInvalidEvent) || !strings.Contains(err.Error(), string(typ)) {
			t.Errorf("Emit %s: %v, want ErrInternalType naming the type", typ, err)
		}
		err = p.EmitSync(ctx, producerstest.TaskAttempt(i, "p"), producerstest.Derived(typ, i, "p"))
		var ie *producers.InvalidEventError
		if !errors.As(err, &ie) || ie.Index != 1 || !errors.Is(err, producers.ErrInternalType) {
			t.Errorf("EmitSync with a %s second: %v, want an InvalidEventError at index 1", typ, err)
		}
	}
	if s := p.Stats(); s.Emitted != 0 {
		t.Errorf("%d events emitted, want 0", s.Emitted)
	}
	for _, typ := range producers.ProducerTypes {
		if err := producers.CheckProducerType(typ); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}

	q, err := producers.New(producers.Config{Brokers: []string{b.Addr()}}, producers.WithInternalTypes())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(ctx)
	for i, typ := range producerstest.DerivedTypes {
		if err := q.EmitSync(ctx, producerstest.Derived(typ, i, "p")); err != nil {
			t.Errorf("WithInternalTypes: EmitSync %s: %v", typ, err)
		}
	}
}
