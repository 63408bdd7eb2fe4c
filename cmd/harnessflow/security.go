package main

import (
	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/kafkax"
)

// kafkaSecurity holds the global --kafka-* flags: how every Kafka client of
// the process authenticates and encrypts (kafkax.Configure).
type kafkaSecurity struct {
	sasl, user, passwordFile, ca string
	tls                          bool
}

func (k *kafkaSecurity) flags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&k.sasl, "kafka-sasl", "", "SASL mechanism to the brokers: plain, scram-sha-256 or scram-sha-512 (empty: none)")
	f.StringVar(&k.user, "kafka-user", "", "SASL user")
	f.StringVar(&k.passwordFile, "kafka-password-file", "", "file whose first line is the SASL password (mode 600)")
	f.BoolVar(&k.tls, "kafka-tls", false, "connect to the brokers over TLS")
	f.StringVar(&k.ca, "kafka-ca", "", "PEM file of the CA certificates of the brokers (implies --kafka-tls; default: the system's)")
}

// apply configures kafkax from the flags (after their environment variables
// were read). With none set the clients are PLAINTEXT, as before.
func (k *kafkaSecurity) apply() error {
	sec := kafkax.Security{SASL: k.sasl, User: k.user, TLS: k.tls, CAFile: k.ca}
	if k.passwordFile != "" {
		pw, err := kafkax.ReadPasswordFile(k.passwordFile)
		if err != nil {
			return err
		}
		sec.Password = pw
	}
	return kafkax.Configure(sec)
}
