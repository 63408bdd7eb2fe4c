package stack

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/sim"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/report"
)

// DemoCounts are the rows a fully processed simulated campaign leaves in
// ClickHouse, counted from the generated events.
type DemoCounts struct {
	Attempts, Updates, Cells int
	// Samples is the number of updates with at least one artifact (each
	// becomes one labeled sample); Rounds the number of (cell, cycle) rounds.
	Samples, Rounds int
}

// CountDemo counts what a processed campaign of events must leave behind.
func CountDemo(events []schemas.Event) DemoCounts {
	var c DemoCounts
	rounds := map[string]bool{}
	for _, ev := range events {
		switch e := ev.(type) {
		case *schemas.TaskAttempt:
			c.Attempts++
			rounds[fmt.Sprintf("%s\x00%d", e.CellID, e.Cycle)] = true
		case *schemas.HarnessUpdate:
			c.Updates++
			if len(e.Artifacts) > 0 {
				c.Samples++
			}
		case *schemas.CellStarted:
			c.Cells++
		}
	}
	c.Rounds = len(rounds)
	return c
}

// DefaultDemoTimeout is how long `up --demo` waits, by default, for its
// campaign to be processed.
const DefaultDemoTimeout = 10 * time.Minute

// RunDemo sends the simulated campaign of cfg into the running stack, waits
// until ClickHouse holds every raw row and every derived figure, and returns
// the campaign's report. Progress goes to progress. Sending the same campaign
// again (a second `up --demo`) changes no figure: every id is deterministic.
func (s *Stack) RunDemo(ctx context.Context, cfg sim.Config, progress io.Writer, timeout time.Duration) (*report.Report, error) {
	select {
	case <-s.Ready():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var events []schemas.Event
	if err := sim.Generate(cfg, func(ev schemas.Event) error { events = append(events, ev); return nil }); err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	want := CountDemo(events)
	ep := s.Endpoints()
	p, err := producers.New(producers.Config{Brokers: kafkax.ParseBrokers(ep.Brokers), Source: "simulate"})
	if err != nil {
		return nil, err
	}
	if _, err := sim.Run(ctx, cfg, p, progress); err != nil {
		_ = p.Close(context.Background())
		return nil, fmt.Errorf("simulate: %w", err)
	}
	if err := p.Close(ctx); err != nil {
		return nil, fmt.Errorf("simulate: deliver events: %w", err)
	}
	fmt.Fprintf(progress, "demo: sent %d events (%d cells); waiting for processing\n", len(events), want.Cells)
	if err := waitProcessed(ctx, s.ClickHouseConn(), s.Endpoints().Database, cfg.Campaign, want, progress, timeout); err != nil {
		return nil, err
	}
	return report.Build(ctx, s.ClickHouseConn(), "", cfg.Campaign)
}

// waitProcessed polls ClickHouse until the deduplicated row counts reach want
// and then until every cell's summary covers its attempts
// (chddl.SummariesBehind: the report reads cell figures from the
// summaries, which the sink writes after the attempts).
func waitProcessed(ctx context.Context, conn driver.Conn, database, campaign string, want DemoCounts, progress io.Writer, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	var lastErr error
	for {
		got, err := countRows(ctx, conn, campaign)
		if err == nil {
			line := fmt.Sprintf("demo: attempts %d/%d, samples %d/%d, round metrics %d/%d, cells finished %d/%d",
				got.Attempts, want.Attempts, got.Samples, want.Samples, got.Rounds, want.Rounds, got.Cells, want.Cells)
			counted := got.Attempts >= want.Attempts && got.Samples >= want.Samples && got.Rounds >= want.Rounds && got.Cells >= want.Cells
			behind := -1
			if counted {
				behind, err = chddl.SummariesBehind(ctx, chx.Session(conn), database, campaign)
				if err == nil {
					line += fmt.Sprintf(", cell summaries behind %d", behind)
				}
			}
			if err == nil {
				if line != last {
					fmt.Fprintln(progress, line)
					last = line
				}
				if behind == 0 {
					return nil
				}
			}
		}
		lastErr = err
		if time.Now().After(deadline) {
			why := last
			if lastErr != nil {
				why += "; last query error: " + lastErr.Error()
			}
			return fmt.Errorf("demo: campaign %q not fully processed after %s (%s); see the components' logs", campaign, timeout, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// countRows counts a campaign's deduplicated rows. The queries hold on a
// single server and through a cluster's Distributed tables alike (GLOBAL
// IN: the subquery runs once, where the query is asked).
func countRows(ctx context.Context, conn driver.Conn, campaign string) (DemoCounts, error) {
	var c DemoCounts
	q := func(dst *int, query string) error {
		var n uint64
		if err := conn.QueryRow(ctx, query, campaign).Scan(&n); err != nil {
			return err
		}
		*dst = int(n)
		return nil
	}
	if err := q(&c.Attempts, "SELECT count() FROM (SELECT event_id FROM task_attempts FINAL WHERE cell_id GLOBAL IN (SELECT cell_id FROM cells FINAL WHERE kind = 'started' AND campaign_id = ?))"); err != nil {
		return c, err
	}
	if err := q(&c.Samples, "SELECT count() FROM labeled_samples FINAL WHERE campaign_id = ?"); err != nil {
		return c, err
	}
	if err := q(&c.Rounds, "SELECT count() FROM round_metrics FINAL WHERE campaign_id = ?"); err != nil {
		return c, err
	}
	if err := q(&c.Cells, "SELECT count() FROM cells FINAL WHERE kind = 'finished' AND cell_id GLOBAL IN (SELECT cell_id FROM cells FINAL WHERE kind = 'started' AND campaign_id = ?)"); err != nil {
		return c, err
	}
	return c, nil
}
