package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/processors"
	"github.com/harnessflow/harnessflow/producers/gen"
	"github.com/harnessflow/harnessflow/schemas"
	"github.com/harnessflow/harnessflow/sinks/chsink"
)

// ceilings measures, on the same broker and server: a plain kafka-go group
// reader over the raw cell topics (events messages from offset 0), and
// clickhouse-client inserting the throughput phase's rows (regenerated,
// byte-identical) from TSV files into twin tables.
func (b *bench) ceilings(ctx context.Context, p plan, events int) (*Ceilings, error) {
	c := &Ceilings{}
	var notes []string
	self := os.Getpid()
	b.pr("ceiling: kafka-go group reader over %s, %d messages from offset 0", strings.Join(processors.CellTopics, ","), events)
	r := kafka.NewReader(kafkax.ReaderConfig(b.cl.Brokers(), b.run+"-ceiling-read", processors.CellTopics...))
	t0 := time.Now()
	cpu0 := usage(self, &notes)
	var n int64
	for ; n < int64(events); n++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := r.FetchMessage(rctx)
		cancel()
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("kafka-go read after %d of %d messages: %w", n, events, err)
		}
	}
	secs := time.Since(t0).Seconds()
	c.readCPU = usage(self, &notes) - cpu0
	r.Close()
	c.KafkaReadEvents = n
	c.KafkaReadEventsPerS = float64(n) / secs
	b.pr("ceiling: kafka-go read %.0f events/s (%.1fs, group join included)", c.KafkaReadEventsPerS, secs)

	client, pre, err := FindClient(b.cfg.Client)
	if err != nil {
		return nil, err
	}
	db := b.cl.Database() + "_ceiling"
	conn := b.cl.Conn()
	if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+chddl.QuoteIdent(db)); err != nil {
		return nil, err
	}
	if _, err := chddl.Migrate(ctx, chx.Session(conn), db); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", db, err)
	}
	dir := filepath.Join(b.cfg.Dir, "ceiling")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	files := map[string]*os.File{}
	colsOf := map[string][]string{}
	rows := 0
	for k := 0; k < 10; k++ {
		camp := b.chunk(p, "tp", k)
		for table, evs := range byTable(camp) {
			_, cols, data, err := chsink.BuildColumns(evs)
			if err != nil {
				return nil, err
			}
			f := files[table]
			if f == nil {
				if f, err = os.Create(filepath.Join(dir, table+".tsv")); err != nil {
					return nil, err
				}
				defer f.Close()
				files[table], colsOf[table] = f, cols
			}
			if err := WriteTSV(f, data); err != nil {
				return nil, err
			}
			rows += len(evs)
		}
	}
	host, port := SplitHostPort(b.cl.ClickHouseAddr())
	var tables []string
	for t := range files {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	var total float64
	srv0 := usage(b.cl.ClickHousePid(), &notes)
	for _, t := range tables {
		files[t].Close()
		s, cpu, err := RunClient(ctx, client, pre, host, port, files[t].Name(),
			"INSERT INTO "+chddl.QuoteIdent(db)+"."+chddl.QuoteIdent(t)+" ("+strings.Join(colsOf[t], ", ")+") FORMAT TabSeparated")
		if err != nil {
			return nil, err
		}
		total += s
		c.insert.client += cpu
	}
	c.insert.server = usage(b.cl.ClickHousePid(), &notes) - srv0
	c.insert.rows = rows
	c.ClickHouseClientRows, c.ClickHouseClientS = rows, total
	if len(notes) > 0 {
		b.log.Warn().Strs("notes", notes).Msg("ceilings: CPU not read")
	}
	c.ClickHouseClientRowsPerS = float64(rows) / total
	b.pr("ceiling: clickhouse-client TSV insert %.0f rows/s (%d rows into %d twin tables, %.1fs)", c.ClickHouseClientRowsPerS, rows, len(tables), total)
	if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+chddl.QuoteIdent(db)); err != nil {
		b.log.Warn().Err(err).Msg("drop ceiling database")
	}
	return c, nil
}

// byTable groups a campaign's events by ClickHouse table (one per raw topic).
func byTable(c *gen.Campaign) map[string][]schemas.Event {
	out := map[string][]schemas.Event{}
	for _, r := range c.Records {
		out[r.Topic] = append(out[r.Topic], r.Event)
	}
	named := map[string][]schemas.Event{}
	for _, evs := range out {
		t, _, _, err := chsink.BuildColumns(evs[:1])
		if err != nil {
			continue
		}
		named[t] = append(named[t], evs...)
	}
	return named
}
