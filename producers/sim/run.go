package sim

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// Emitter is what Run writes events to; *producers.Producer satisfies it.
type Emitter interface {
	Emit(ctx context.Context, ev schemas.Event) error
	Flush(ctx context.Context) error
}

// Stats count what Run emitted.
type Stats struct {
	// Events is the number of events emitted.
	Events int
	// Cells is the number of cells finished.
	Cells int
	// ByType counts events per type.
	ByType map[schemas.Type]int
}

// Run generates the campaign of cfg and emits every event to em, then flushes
// it. When progress is not nil it draws a progress bar there (one line,
// redrawn with \r after each cell). It returns at the first emit or flush
// error, or when ctx ends.
func Run(ctx context.Context, cfg Config, em Emitter, progress io.Writer) (Stats, error) {
	cfg.setDefaults()
	st := Stats{ByType: map[schemas.Type]int{}}
	total := cfg.Cells()
	err := Generate(cfg, func(ev schemas.Event) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := em.Emit(ctx, ev); err != nil {
			return fmt.Errorf("emit %s %s: %w", ev.Type(), ev.Header().EventID, err)
		}
		st.Events++
		st.ByType[ev.Type()]++
		if ev.Type() == schemas.TypeCellFinished {
			st.Cells++
			if progress != nil {
				drawBar(progress, st.Cells, total, st.Events)
			}
		}
		return nil
	})
	if progress != nil && st.Cells > 0 {
		fmt.Fprintln(progress)
	}
	if err != nil {
		return st, err
	}
	if err := em.Flush(ctx); err != nil {
		return st, fmt.Errorf("flush: %w", err)
	}
	return st, nil
}

func drawBar(w io.Writer, done, total, events int) {
	const width = 30
	n := width
	if total > 0 {
		n = done * width / total
	}
	fmt.Fprintf(w, "\rsimulate [%s%s] %d/%d cells, %d events", strings.Repeat("#", n), strings.Repeat(".", width-n), done, total, events)
}
