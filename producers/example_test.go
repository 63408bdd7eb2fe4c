package producers_test

import (
	"context"
	"fmt"
	"time"

	"github.com/harnessflow/harnessflow/internal/broker"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/schemas"
)

func ExampleProducer() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// An embedded broker; in production, the addresses of your Kafka cluster.
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	if err := kafkax.EnsureAllTopics(ctx, []string{b.Addr()}, b.TopicOption()); err != nil {
		fmt.Println(err)
		return
	}

	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}, Project: "demo", Source: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for task := 1; task <= 3; task++ {
		err := p.Emit(ctx, &schemas.TaskAttempt{
			CellID: "cell-1", TaskID: fmt.Sprintf("task-%d", task), Attempt: 1, HarnessVersion: "h0",
			Status: schemas.StatusOK, Score: 1, Success: true, Final: true,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	// Close flushes: every accepted event is delivered or reported.
	if err := p.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}
	s := p.Stats()
	fmt.Printf("delivered %d of %d events, %d failed\n", s.Delivered, s.Emitted, s.Failed)
	// Output: delivered 3 of 3 events, 0 failed
}
