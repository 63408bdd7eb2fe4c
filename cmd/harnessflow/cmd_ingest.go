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
(nothing of the request is produced); 401 without a known token; 403 on a project
mismatch; 413 above --max-body.

It also serves POST /v1/traces, an OTLP/HTTP trace receiver (protobuf or JSON,
gzip allowed, the same tokens): invoke_agent spans become task_attempt events and
skill-loading tool spans skill_event events (docs/otlp.md has the mapping); and
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
	f.Int64Var(&cfg.MaxInflightPerToken, "max-inflight-bytes-per-token", 0, "in-flight body bytes of one token's requests, so that one tenant cannot starve the others (0: a quarter of --max-inflight-bytes, at least --max-body)")
	f.DurationVar(&cfg.ReadTimeout, "read-timeout", d.ReadTimeout, "a request body not read within it is answered 408 and releases its budget")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", d.IdleTimeout, "close keep-alive connections idle this long")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate file: with --tls-key, serve HTTPS only")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM key file of --tls-cert")
	return cmd
}
