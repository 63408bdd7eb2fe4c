package kafkax_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/schemas"
)

// selfSigned returns a TLS server config for 127.0.0.1 and the PEM file of
// its certificate (its own CA).
func selfSigned(t *testing.T) (*tls.Config, string) {
	c := testenv.SelfSignedCert(t, t.TempDir())
	return c.Server, c.Cert
}

// roundTrip creates the topics, writes one record and reads it back through
// a consumer group, all with this process's security (kafkax.Configure).
func roundTrip(ctx context.Context, addr string) error {
	brokers := []string{addr}
	if err := kafkax.EnsureAllTopics(ctx, brokers, kafkax.WithReplicationFactor(1)); err != nil { // the one-node embedded broker
		return err
	}
	w := kafkax.NewWriter(kafkax.WriterConfig{Brokers: brokers, Topic: schemas.TopicCampaigns})
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("secured")}); err != nil {
		return err
	}
	r := kafka.NewReader(kafkax.ReaderConfig(brokers, "secured-g", schemas.TopicCampaigns))
	defer r.Close()
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return err
	}
	if string(m.Value) != "secured" {
		return os.ErrInvalid
	}
	return r.CommitMessages(ctx, m)
}

// TestSASLAndTLSToTheEmbeddedBroker: a broker that requires SASL over TLS
// (harnessflow broker --sasl-users --tls-cert --tls-key) is reached with
// each mechanism and the right CA; a wrong password, no SASL, or no TLS is
// refused.
func TestSASLAndTLSToTheEmbeddedBroker(t *testing.T) {
	srvTLS, ca := selfSigned(t)
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", SASLUsers: map[string]string{"svc": "s3cret"}, TLS: srvTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Cleanup(func() { _ = kafkax.Configure(kafkax.Security{}) })

	for _, mech := range []string{kafkax.SASLPlain, kafkax.SASLScramSHA256, kafkax.SASLScramSHA512} {
		if err := kafkax.Configure(kafkax.Security{SASL: mech, User: "svc", Password: "s3cret", TLS: true, CAFile: ca}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := roundTrip(ctx, b.Addr())
		cancel()
		if err != nil {
			t.Fatalf("%s over TLS: %v", mech, err)
		}
	}

	for name, sec := range map[string]kafkax.Security{
		"wrong password": {SASL: kafkax.SASLScramSHA256, User: "svc", Password: "guess", CAFile: ca},
		"no SASL":        {TLS: true, CAFile: ca},
		"no TLS":         {SASL: kafkax.SASLPlain, User: "svc", Password: "s3cret"},
	} {
		if err := kafkax.Configure(sec); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := roundTrip(ctx, b.Addr())
		cancel()
		if err == nil {
			t.Errorf("%s: the secured broker accepted the client", name)
		}
	}
}

// TestConfigureRefusesIncompleteSettings: a mechanism without credentials,
// credentials without a mechanism, an unknown mechanism and a CA file with
// no certificate are errors naming the flag to fix.
func TestConfigureRefusesIncompleteSettings(t *testing.T) {
	t.Cleanup(func() { _ = kafkax.Configure(kafkax.Security{}) })
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sec  kafkax.Security
		want string
	}{
		{kafkax.Security{SASL: "plain"}, "--kafka-user"},
		{kafkax.Security{User: "u", Password: "p"}, "--kafka-sasl"},
		{kafkax.Security{SASL: "gssapi", User: "u", Password: "p"}, "--kafka-sasl"},
		{kafkax.Security{TLS: true, CAFile: empty}, "--kafka-ca"},
	} {
		err := kafkax.Configure(c.sec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Configure(%+v) = %v, want an error naming %s", c.sec, err, c.want)
		}
	}
	if err := kafkax.Configure(kafkax.Security{}); err != nil || kafkax.Secured() {
		t.Fatalf("the zero Security: err %v, secured %v", err, kafkax.Secured())
	}
}
