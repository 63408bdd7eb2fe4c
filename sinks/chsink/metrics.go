package chsink

import "github.com/prometheus/client_golang/prometheus"

// sinkMetrics are the sink's Prometheus metrics (names hf_sink_*).
type sinkMetrics struct {
	rows     *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	rejected *prometheus.CounterVec
	buffered prometheus.Gauge
	// kafkaRestarts counts consumer restarts after a Kafka error;
	// startRetries the connects or migrations ClickHouse failed at start.
	kafkaRestarts prometheus.Counter
	startRetries  prometheus.Counter
	// registryErrors counts decodes of Confluent-framed messages retried
	// because the schema registry could not be asked.
	registryErrors prometheus.Counter
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
	var all []prometheus.Collector
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		all = append(all, g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		all = append(all, c)
		return c
	}
	perTable := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"table"})
		all = append(all, c)
		return c
	}
	m := &sinkMetrics{
		rows:    perTable("hf_sink_rows_inserted_total", "Rows inserted into ClickHouse, per table."),
		retries: perTable("hf_sink_insert_retries_total", "Insert attempts that failed and were retried, per table."),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hf_sink_insert_seconds", Help: "Duration of one insert attempt, per table.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14),
		}, []string{"table"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hf_sink_undecodable_total", Help: "Messages that did not decode (written to rejected_events), per topic.",
		}, []string{"topic"}),
		buffered:      gauge("hf_sink_buffered_rows", "Rows read from Kafka and not yet inserted."),
		kafkaRestarts: counter("hf_sink_consumer_restarts_total", "Times the consumer started again after a Kafka fetch or commit error."),
		startRetries:  counter("hf_sink_start_retries_total", "Times connecting to or migrating ClickHouse at start failed on an outage and was tried again."),
		registryErrors: counter("hf_sink_schema_registry_errors_total",
			"Decodes of a Confluent-framed message retried because the schema registry (--schema-registry) was unreachable or failed; nothing is rejected for it."),
		commitLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hf_sink_commit_lag", Help: "Log end offset minus the group's committed offset, by group, topic and partition (polled every LagInterval).",
		}, []string{"group", "topic", "partition"}),
		unverified: gauge("hf_sink_cell_scores_unverified",
			"Cells whose cell_scores summary, recomputed through a cluster, is not yet verified against their attempts (0: every summary this sink wrote is whole)."),
		repairs: counter("hf_sink_cell_scores_repairs_total",
			"Cells recomputed again because verification found their summary short (a replica had not fetched their attempts)."),
		unverifiedDropped: counter("hf_sink_cell_scores_unverified_dropped_total",
			"Cells dropped unverified because more than MaxUnverified awaited verification."),
		queuedCells: gauge("hf_sink_cell_scores_queued_cells",
			"Cells of inserted attempts queued for their cell_scores recomputation (not counting those being recomputed)."),
		queuedProjects: gauge("hf_sink_cell_scores_queued_projects",
			"Projects with cells queued for, or in, a cell_scores recomputation."),
		busyWorkers: gauge("hf_sink_cell_scores_busy_workers",
			"Recompute workers recomputing a project's cells now (of RecomputeWorkers; one project per worker)."),
		oldestWait: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hf_sink_cell_scores_oldest_wait_seconds", Help: "Age of the oldest inserted attempt batch whose cells' cell_scores are not recomputed yet, over all projects (0: none waits).",
		}, oldestWait),
		recomputeLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hf_sink_cell_scores_lag_seconds", Help: "Time from a batch's attempts inserted to their project's cell_scores written (its offsets commit after).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(append(all, m.latency, m.rejected, m.commitLag, m.oldestWait, m.recomputeLag)...)
	}
	return m
}
