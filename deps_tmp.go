package main
import (
 _ "github.com/segmentio/kafka-go"
 _ "github.com/ClickHouse/clickhouse-go/v2"
 _ "github.com/linkedin/goavro/v2"
 _ "github.com/cenkalti/backoff/v4"
 _ "github.com/rs/zerolog"
 _ "github.com/twmb/franz-go/pkg/kfake"
 _ "gonum.org/v1/gonum/stat/distuv"
 _ "github.com/ebitengine/purego"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/spf13/cobra"
)
func main(){}
