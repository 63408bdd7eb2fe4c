package kafkax_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/broker"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/schemas"
)

// selfSigned returns a TLS server config for 127.0.0.1 and the PEM file of
// its certificate (its own CA).
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "harnessflow test broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, ca
}

// roundTrip creates the topics, writes one record and reads it back through
// a consumer group, all with this process's security (kafkax.Configure).
func roundTrip(ctx context.Context, addr string) error {
	brokers := []string{addr}
	if err := kafkax.EnsureAllTopics(ctx, brokers); err != nil {
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
