package processors

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Processor's Prometheus series (all prefixed hf_process_).
type metrics struct {
	eventsIn      *prometheus.CounterVec // by topic
	admitted      prometheus.Counter
	rejectedBy    *prometheus.CounterVec // by stage, code
	duplicates    prometheus.Counter
	samples       prometheus.Counter
	roundMetrics  prometheus.Counter
	pending       prometheus.Gauge
	stateCells    prometheus.Gauge
	statePairers  prometheus.Gauge
	commitLag     *prometheus.GaugeVec // by group, topic, partition
	evictedCells  prometheus.Counter
	evictedPairs  prometheus.Counter
	agedOutCells  prometheus.Counter
	agedOutPairs  prometheus.Counter
	encodeErrors  prometheus.Counter
	droppedOrphan prometheus.Counter
	rebuilds      *prometheus.CounterVec // by stage
	writeRetries  prometheus.Counter
	fetches       *prometheus.CounterVec // by topic
	fetchedRecs   *prometheus.CounterVec // by topic
	fetchGaveUp   *prometheus.CounterVec // by topic
	// registryErrors counts fetches whose Confluent-framed messages could
	// not be decoded because the schema registry could not be asked.
	registryErrors prometheus.Counter
	// afterFinish is, for each event admitted after its cell's
	// cell_finished, how late it came on the log clock: the tail that
	// Config.FinishHold did not cover (each re-emits its cell's figures).
	afterFinish prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		eventsIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hf_process_events_in_total",
			Help: "Input messages processed (rebuilds included), by topic."}, []string{"topic"}),
		admitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_admitted_total",
			Help: "Raw events that passed every validation stage."}),
		rejectedBy: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hf_process_rejected_total",
			Help: "Inputs dead-lettered, by stage and reason code."}, []string{"stage", "code"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_duplicates_total",
			Help: "Raw events skipped because their event_id was already admitted for the cell."}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_samples_total",
			Help: "Labeled samples written to hf.samples."}),
		roundMetrics: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_round_metrics_total",
			Help: "Round metrics written to hf.round-metrics."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hf_process_pending_events",
			Help: "Events waiting for their cell_started or harness version, over assigned partitions."}),
		stateCells: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hf_process_state_cells",
			Help: "Cells held by stage A over assigned partitions."}),
		statePairers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hf_process_state_pairers",
			Help: "Pairers held by stage B over assigned partitions."}),
		commitLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hf_process_commit_lag",
			Help: "High watermark minus committed offset, by group, topic and partition."}, []string{"group", "topic", "partition"}),
		evictedCells: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_evicted_cells_total",
			Help: "Finished cells evicted from stage A after the grace period."}),
		evictedPairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_evicted_pairers_total",
			Help: "Done pairers evicted from stage B after the grace period."}),
		agedOutCells: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_aged_out_cells_total",
			Help: "Unfinished cells dropped by stage A after Config.CellIdle (--cell-idle) without an admitted event (each also a limit/cell_idle dead letter)."}),
		agedOutPairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_aged_out_pairers_total",
			Help: "Pairers with unfinished cells dropped by stage B after Config.CellIdle (--cell-idle) without an event."}),
		encodeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_encode_errors_total",
			Help: "Derived events that could not be encoded (a bug)."}),
		droppedOrphan: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_orphans_dropped_total",
			Help: "Stage-B events whose cell stage B no longer holds (their pairer was evicted or aged out, or its buffer was full): each is a limit/late_beyond_window dead letter."}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hf_process_rebuilds_total",
			Help: "Partition state rebuilds from offset 0, by stage."}, []string{"stage"}),
		writeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_write_retries_total",
			Help: "Output writes retried after an error."}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hf_process_fetches_total",
			Help: "Fetch requests answered, by topic (with hf_process_fetched_records_total: records per fetch)."}, []string{"topic"}),
		fetchedRecs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hf_process_fetched_records_total",
			Help: "Kafka records fetched (offsets a fetch advanced over), by topic; a batched hf.outcomes record counts once."}, []string{"topic"}),
		fetchGaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hf_process_fetch_failures_total",
			Help: "Fetchers of the campaign declarations (hf.campaigns) that failed past their retry budget (a broker outage) and were started again from where they stopped; the stages' partitions count theirs in hf_process_rebuilds_total."}, []string{"topic"}),
		registryErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "hf_process_schema_registry_errors_total",
			Help: "Fetches read again because a Confluent-framed message's schema id could not be resolved: the schema registry (--schema-registry) was unreachable or failed. Nothing is dead-lettered for it."}),
		afterFinish: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hf_process_after_finish_seconds",
			Help:    "Events admitted after their cell's cell_finished: how much later they reached the log (log time after the finish's). Each one re-emits its cell's labeled samples and round metrics; a tail beyond --finish-hold says to raise it.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600}}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.eventsIn, m.admitted, m.rejectedBy, m.duplicates, m.samples,
		m.roundMetrics, m.pending, m.stateCells, m.statePairers, m.commitLag, m.evictedCells, m.evictedPairs, m.agedOutCells, m.agedOutPairs,
		m.encodeErrors, m.droppedOrphan, m.rebuilds, m.writeRetries, m.fetches, m.fetchedRecs, m.fetchGaveUp, m.registryErrors, m.afterFinish} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) rejected(r *rejection) { m.rejectedBy.WithLabelValues(r.stage, r.code).Inc() }
