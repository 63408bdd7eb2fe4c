package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harnessflow/harnessflow/internal/chx"
	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/secret"
)

// security holds the global credential and TLS flags of the process: how
// its Kafka clients (--kafka-*) and its ClickHouse connections
// (--clickhouse-user, --clickhouse-password-file, --clickhouse-tls,
// --clickhouse-ca) authenticate and encrypt. docs/security.md is the guide.
type security struct {
	kafka      kafkaSecurity
	clickhouse clickhouseSecurity
}

func (s *security) flags(root *cobra.Command) {
	s.kafka.flags(root)
	s.clickhouse.flags(root)
}

// apply configures kafkax and chx from the flags (after their environment
// variables were read).
func (s *security) apply() error {
	if err := s.kafka.apply(); err != nil {
		return err
	}
	return s.clickhouse.apply()
}

// kafkaSecurity holds the global --kafka-* flags: how every Kafka client of
// the process authenticates and encrypts (kafkax.Configure), and
// --kafka-replication-factor, the factor of every topic it creates
// (kafkax.SetReplicationFactor), which is no credential but is as global.
type kafkaSecurity struct {
	sasl, user, passwordFile, ca string
	tls                          bool
	replication                  int
}

func (k *kafkaSecurity) flags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&k.sasl, "kafka-sasl", "", "SASL mechanism to the brokers: plain, scram-sha-256 or scram-sha-512 (empty: none)")
	f.StringVar(&k.user, "kafka-user", "", "SASL user")
	f.StringVar(&k.passwordFile, "kafka-password-file", "", "file whose first line is the SASL password (mode 600)")
	f.BoolVar(&k.tls, "kafka-tls", false, "connect to the brokers over TLS")
	f.StringVar(&k.ca, "kafka-ca", "", "PEM file of the CA certificates of the brokers (implies --kafka-tls; default: the system's)")
	f.IntVar(&k.replication, "kafka-replication-factor", 0,
		"replication factor of every topic this process creates, instead of each topic's declared one (3); "+
			"0: each topic's declared factor, refused when the cluster has fewer brokers; the embedded broker uses its own broker count, 1")
}

// apply configures kafkax from the flags (after their environment variables
// were read). With none set the clients are PLAINTEXT, as before.
func (k *kafkaSecurity) apply() error {
	if k.replication < 0 {
		return fmt.Errorf("--kafka-replication-factor %d: want 1 or more, or 0 for each topic's declared factor", k.replication)
	}
	kafkax.SetReplicationFactor(k.replication)
	sec := kafkax.Security{SASL: k.sasl, User: k.user, TLS: k.tls, CAFile: k.ca}
	if k.passwordFile != "" {
		pw, err := secret.FirstLine(k.passwordFile, "--kafka-password-file")
		if err != nil {
			return err
		}
		sec.Password = pw
	}
	return kafkax.Configure(sec)
}

// clickhouseSecurity holds the global --clickhouse-* credential flags: how
// every ClickHouse connection of the process authenticates and encrypts
// (chx.Configure).
type clickhouseSecurity struct {
	user, passwordFile, ca string
	tls                    bool
}

func (c *clickhouseSecurity) flags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&c.user, "clickhouse-user", chx.DefaultUser, "ClickHouse user")
	f.StringVar(&c.passwordFile, "clickhouse-password-file", "", "file whose first line is the ClickHouse user's password (mode 600; default: no password)")
	f.BoolVar(&c.tls, "clickhouse-tls", false, "connect to ClickHouse over TLS (its secure native port, usually 9440)")
	f.StringVar(&c.ca, "clickhouse-ca", "", "PEM file of the CA certificates of the ClickHouse server (implies --clickhouse-tls; default: the system's)")
}

// apply configures chx from the flags (after their environment variables
// were read). With none set, connections are as before: user default, no
// password, plain TCP.
func (c *clickhouseSecurity) apply() error {
	sec := chx.Security{User: c.user, TLS: c.tls, CAFile: c.ca}
	if c.passwordFile != "" {
		pw, err := secret.FirstLine(c.passwordFile, "--clickhouse-password-file")
		if err != nil {
			return fmt.Errorf("--clickhouse-password-file: %w", err)
		}
		sec.Password = pw
	}
	return chx.Configure(sec)
}
