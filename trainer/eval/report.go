package eval

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// fmtIv renders an interval as "point [lo, hi]", or "-" when it does not
// apply.
func fmtIv(iv Interval) string {
	if math.IsNaN(iv.Point) {
		return "-"
	}
	return fmt.Sprintf("%.4f [%.4f, %.4f]", iv.Point, iv.Lo, iv.Hi)
}

// WriteTable writes r as aligned text: a header line, one line per
// predictor (the model first) with every metric as "point [lo, hi]" ("-"
// where it does not apply), the comparisons, and the verdict.
func (r *Report) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "held-out: %d rows in %d groups (%s); %d group resamples, %g%% percentile intervals, seed %d\n",
		r.Rows, r.Groups, r.Key, r.Resamples, 100*r.Level, r.Seed); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "predictor\trmse\tspearman\tcover 1σ (0.683)\tcover 2σ (0.954)\tnll\tmacro-F1\tpairwise (within round)")
	for _, row := range append([]Row{r.Model}, r.Baselines...) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row.Name, fmtIv(row.RMSE), fmtIv(row.Spearman),
			fmtIv(row.Cover1), fmtIv(row.Cover2), fmtIv(row.NLL), fmtIv(row.MacroF1), fmtIv(row.Pairs))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s − best baseline\tbaseline\tdifference\tverdict\n", r.Model.Name)
	for _, c := range r.Comparisons {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Metric, c.Baseline, fmtIv(c.Diff), c.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Note != "" {
		if _, err := fmt.Fprintf(w, "note: %s\n", r.Note); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
	return err
}
