package chsink

import "github.com/prometheus/client_golang/prometheus"

// sinkMetrics are the sink's Prometheus metrics (names hf_sink_*).
type sinkMetrics struct {
	rows     *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	rejected *prometheus.CounterVec
	buffered prometheus.Gauge
	// kafkaRestarts counts consumer restarts after a Kafka error.
	kafkaRestarts prometheus.Counter
	// commitLag is the group's lag per partition (lag.go).
	commitLag *prometheus.GaugeVec
	// unverified, repairs and unverifiedDropped follow the verification of
	// cell_scores on a cluster (verify.go).
	unverified        prometheus.Gauge
	repairs           prometheus.Counter
	unverifiedDropped prometheus.Counter
	// queuedCells, queuedProjects, busyWorkers, oldestWait and
	// recomputeLag follow the per-project recompute queue (recompute.go).
	queuedCells    prometheus.Gauge
	queuedProjects prometheus.Gauge
	busyWorkers    prometheus.Gauge
	oldestWait     prometheus.GaugeFunc
	recomputeLag   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, oldestWait func() float64) *sinkMetrics {
	m := &sinkMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hf_sink_rows_inserted_total", Help: "Rows inserted into ClickHouse, per table.",
		}, []string{"table"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hf_sink_insert_seconds", Help: "Duration of one insert attempt, per table.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14),
		}, []string{"table"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hf_sink_insert_retries_total", Help: "Insert attempts that failed and were retried, per table.",
		}, []string{"table"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hf_sink_undecodable_total", Help: "Messages that did not decode (written to rejected_events), per topic.",
		}, []string{"topic"}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hf_sink_buffered_rows", Help: "Rows read from Kafka and not yet inserted.",
		}),
		kafkaRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hf_sink_consumer_restarts_total", Help: "Times the consumer started again after a Kafka fetch or commit error.",
		}),
		commitLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hf_sink_commit_lag", Help: "Log end offset minus the group's committed offset, by group, topic and partition (polled every LagInterval).",
		}, []string{"group", "topic", "partition"}),
		unverified: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hf_sink_cell_scores_unverified", Help: "Cells whose cell_scores summary, recomputed through a cluster, is not yet verified against their attempts (0: every summary this sink wrote is whole).",
		}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hf_sink_cell_scores_repairs_total", Help: "Cells recomputed again because verification found their summary short (a replica had not fetched their attempts).",
		}),
		unverifiedDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hf_sink_cell_scores_unverified_dropped_total", Help: "Cells dropped unverified because more than MaxUnverified awaited verification.",
		}),
		queuedCells: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hf_sink_cell_scores_queued_cells", Help: "Cells of inserted attempts queued for their cell_scores recomputation (not counting those being recomputed).",
		}),
		queuedProjects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hf_sink_cell_scores_queued_projects", Help: "Projects with cells queued for, or in, a cell_scores recomputation.",
		}),
		busyWorkers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hf_sink_cell_scores_busy_workers", Help: "Recompute workers recomputing a project's cells now (of RecomputeWorkers; one project per worker).",
		}),
		oldestWait: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hf_sink_cell_scores_oldest_wait_seconds", Help: "Age of the oldest inserted attempt batch whose cells' cell_scores are not recomputed yet, over all projects (0: none waits).",
		}, oldestWait),
		recomputeLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hf_sink_cell_scores_lag_seconds", Help: "Time from a batch's attempts inserted to their project's cell_scores written (its offsets commit after).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.latency, m.retries, m.rejected, m.buffered, m.kafkaRestarts, m.commitLag, m.unverified, m.repairs, m.unverifiedDropped,
			m.queuedCells, m.queuedProjects, m.busyWorkers, m.oldestWait, m.recomputeLag)
	}
	return m
}
