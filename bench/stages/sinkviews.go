package stages

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/infra/chddl"
	"github.com/harnessflow/harnessflow/internal/chx"
)

// benchViews fills database with n generated attempts over 360 cells (2
// benchmarks x 10 agents x (baseline + 5 evolvers) x 3 seeds) and times the
// cross-evaluation views: once live (no cell_scores rows yet) when liveViews
// is set, then, after recomputing every cell's summary as the sink does, best
// of three, checking that they return the live rows.
func benchViews(ctx context.Context, out io.Writer, conn driver.Conn, database string, n int, liveViews bool) error {
	db := chddl.QuoteIdent(database)
	if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		return err
	}
	if _, err := chddl.Migrate(ctx, chx.Session(conn), database); err != nil {
		return err
	}
	t0 := time.Now()
	for _, q := range []string{
		`INSERT INTO ` + db + `.campaigns (event_id, project, campaign_id, benchmarks, anchor_agents, anchor_evolvers, _version)
		 SELECT 'camp', 'bench', 'c1', ['bench-0', 'bench-1'], ['agent-0', 'agent-1', 'agent-2'], ['evolver-1', 'evolver-2', 'evolver-3'], 1`,
		`INSERT INTO ` + db + `.cells (event_id, project, kind, cell_id, campaign_id, benchmark, agent_model, evolver_model, seed, route, _version)
		 SELECT concat('cs-', toString(number)), 'bench', 'started', concat('cell-', toString(number)), 'c1',
		        concat('bench-', toString(intDiv(number, 180))), concat('agent-', toString(number % 10)),
		        if(intDiv(number, 10) % 6 = 0, '', concat('evolver-', toString(intDiv(number, 10) % 6))),
		        toInt32(intDiv(number, 60) % 3), if(intDiv(number, 10) % 6 = 0, 'baseline', 'in_situ'), number
		 FROM numbers(360)`,
		fmt.Sprintf(`INSERT INTO %s.task_attempts (event_id, project, cell_id, task_id, attempt, status, success, final, score, skills_available, _version)
		 SELECT concat('a-', toString(number)), 'bench', concat('cell-', toString(number %% 360)), concat('t-', toString(intDiv(number, 360))),
		        1, 'ok', toUInt8(cityHash64(number) %% 100 < 20 + (number %% 10) * 5 + (intDiv(number %% 360, 10) %% 6) * 2), 1,
		        (cityHash64(number) %% 1000) / 1000, 2, number
		 FROM numbers(%d)`, db, n),
	} {
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("generate view data: %w", err)
		}
	}
	fmt.Fprintf(out, "view data: %d attempts in 360 cells generated in %.1fs\n", n, time.Since(t0).Seconds())
	views := []string{"v_cell_scores", "v_pair_gain", "v_update_gain", "v_benefit_gain"}
	// Rows written by INSERT ... SELECT have no cell_scores summary: the views
	// compute them live (the cost before cell_scores existed).
	live := map[string][][]string{}
	for _, v := range views {
		if !liveViews {
			break
		}
		secs, res, err := timeView(ctx, conn, db, v, 1)
		if err != nil {
			return err
		}
		live[v] = res
		fmt.Fprintf(out, "%-34s %8.3f s  (%d rows, live: no summaries, over %d attempts)\n", "SELECT * FROM "+v, secs, len(res), n)
	}
	// What the sink does after inserting attempts: recompute their cells.
	cells := make([]string, 360)
	for i := range cells {
		cells[i] = fmt.Sprintf("cell-%d", i)
	}
	t1 := time.Now()
	if err := chddl.RecomputeCellScores(ctx, chx.Session(conn), database, cells); err != nil {
		return err
	}
	fmt.Fprintf(out, "cell_scores of all 360 cells recomputed in %.2fs (%.3fs per cell of %d attempts)\n",
		time.Since(t1).Seconds(), time.Since(t1).Seconds()/360, n/360)
	for _, v := range views {
		secs, res, err := timeView(ctx, conn, db, v, 3)
		if err != nil {
			return err
		}
		same := ""
		if want, ok := live[v]; ok {
			same = ", same rows as live"
			if !sameRows(want, res) {
				same = ", DIFFERENT FROM LIVE"
			}
		}
		fmt.Fprintf(out, "%-34s %8.3f s  (%d rows, best of 3, from cell_scores%s, over %d attempts)\n", "SELECT * FROM "+v, secs, len(res), same, n)
	}
	return nil
}

// timeView runs SELECT * FROM db.v (sorted) runs times; it returns the best time and the rows.
func timeView(ctx context.Context, conn driver.Conn, db, v string, runs int) (float64, [][]string, error) {
	best := math.Inf(1)
	var rows [][]string
	for i := 0; i < runs; i++ {
		t := time.Now()
		_, res, err := chx.QueryStrings(ctx, conn, "SELECT * FROM "+db+"."+v)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", v, err)
		}
		best = math.Min(best, time.Since(t).Seconds())
		rows = res
	}
	sort.Slice(rows, func(i, j int) bool { return strings.Join(rows[i], "\t") < strings.Join(rows[j], "\t") })
	return best, rows, nil
}

// sameRows compares two sorted result sets, numbers to 1e-9 relative.
func sameRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] == b[i][j] {
				continue
			}
			x, e1 := strconv.ParseFloat(a[i][j], 64)
			y, e2 := strconv.ParseFloat(b[i][j], 64)
			if e1 != nil || e2 != nil || math.Abs(x-y) > 1e-9*math.Max(1, math.Abs(x)) {
				return false
			}
		}
	}
	return true
}
