package main

import (
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/obs"
	"github.com/harnessflow/harnessflow/producers/ingest"
)

func init() { register(newIngestCmd) }

func newIngestCmd() *cobra.Command {
	var brokers string
	var cfg ingest.Config
	cmd := &cobra.Command{
		Use:   "ingest --tokens FILE",
		Short: "Run the HTTP gateway that takes events from agents in any language",
		Long: `ingest serves POST /v1/events: one JSON event, a JSON array of events, or NDJSON,
with "Authorization: Bearer TOKEN". The tokens file has one "TOKEN PROJECT" pair per
line (# comments and blank lines allowed); an event's project must be the token's
(an event without one gets it). Answers: 202 {"accepted": N} once the brokers
acknowledged every event; 400 with [{index, error}] when any event is invalid
(nothing of the request is produced), or naming the type of an event the pipeline
derives itself (labeled_sample, round_metrics, rejected, checkpoint_published:
producers may not send them); 401 without a known token; 403 on a project
mismatch; 413 above --max-body; 503 with Retry-After while the in-flight budget,
or the token's project's share of it, is full.

It also serves POST /v1/traces, an OTLP/HTTP trace receiver (protobuf or JSON,
gzip allowed, the same tokens): invoke_agent spans become task_attempt events and
skill-loading tool spans skill_event events (docs/otlp.md has the mapping); a
request past --max-events spans, --max-otlp-resources or --max-otlp-attributes is
answered 413 before it is decoded (docs/security.md lists every limit); and
/healthz, /readyz and /metrics. /healthz answers 200 while the process runs;
/readyz answers 503 naming what is unreachable while no Kafka broker answers.`,
		Example: "  harnessflow ingest --brokers 127.0.0.1:9092 --listen 127.0.0.1:8080 --tokens tokens.txt\n" +
			"  curl -H 'Authorization: Bearer T' --data-binary @events.ndjson http://127.0.0.1:8080/v1/events",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := obs.NewLogger("ingest")
			cfg.Brokers = kafkax.ParseBrokers(brokers)
			srv, err := ingest.New(cfg, ingest.WithLogger(log))
			if err != nil {
				return withCode(2, err)
			}
			if err := srv.Run(cmd.Context()); err != nil {
				return withCode(2, err)
			}
			log.Info().Msg("ingest stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", kafkax.DefaultBrokers, "Kafka brokers, host:port[,host:port]")
	d := ingest.DefaultConfig()
	f.StringVar(&cfg.Listen, "listen", d.Listen, "HTTP host:port to listen on")
	f.StringVar(&cfg.TokensFile, "tokens", "", "file of \"TOKEN PROJECT\" lines (required)")
	f.Int64Var(&cfg.MaxBody, "max-body", d.MaxBody, "largest request body in bytes")
	f.IntVar(&cfg.MaxEvents, "max-events", d.MaxEvents, "most events in one request")
	f.DurationVar(&cfg.DeliveryTimeout, "delivery-timeout", d.DeliveryTimeout, "how long a request waits for acknowledgement")
	f.Int64Var(&cfg.MaxInflight, "max-inflight-bytes", 0, "body bytes of the requests handled at once; past it a request gets 503 with Retry-After at once (0: 8 x --max-body)")
	f.Int64Var(&cfg.MaxInflightPerProject, "max-inflight-bytes-per-project", 0, "in-flight body bytes of one project's requests, all its tokens together, so that one tenant cannot starve the others (0: a quarter of --max-inflight-bytes, at least --max-body)")
	f.Int64Var(&cfg.MaxInflightPerToken, "max-inflight-bytes-per-token", 0, "former name of --max-inflight-bytes-per-project")
	_ = f.MarkDeprecated("max-inflight-bytes-per-token", "use --max-inflight-bytes-per-project (a token's share is now its project's)")
	f.Int64Var(&cfg.MinHold, "min-hold-bytes", 0, "the least a request takes of the in-flight budgets whatever its Content-Length, bounding the requests in flight per project (0: 64 KiB, at most --max-body)")
	f.IntVar(&cfg.MaxOTLPAttributes, "max-otlp-attributes", d.MaxOTLPAttributes, "most attributes (key-values at every level, array and kvlist elements, span events and links) in one /v1/traces request; past it 413, before decoding")
	f.IntVar(&cfg.MaxOTLPResources, "max-otlp-resources", 0, "most resource_spans, and scope_spans, in one /v1/traces request; past it 413, before decoding (0: --max-events)")
	f.DurationVar(&cfg.ReadTimeout, "read-timeout", d.ReadTimeout, "a request body not read within it is answered 408 and releases its budget")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", d.IdleTimeout, "close keep-alive connections idle this long")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate file: with --tls-key, serve HTTPS only")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM key file of --tls-cert")
	return cmd
}
