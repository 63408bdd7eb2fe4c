package chsink

import (
	"errors"
	"testing"
)

// TestFetcherEndedReportsTheQueuedError: the fetcher queues its error, then
// closes the message channel; a loop that sees the close first must still
// get the error (a restart of the consumer), not a clean stop.
func TestFetcherEndedReportsTheQueuedError(t *testing.T) {
	fetchErr := make(chan error, 1)
	msgs := make(chan struct{})
	want := &kafkaError{errors.New("fetch: broker went away")}
	go func() {
		defer close(msgs)
		fetchErr <- want
	}()
	<-msgs // closed: as the loop sees it
	var ke *kafkaError
	if err := fetcherEnded(fetchErr); !errors.As(err, &ke) || ke != want {
		t.Fatalf("fetcherEnded after a fetch error = %v, want the queued %v", err, want)
	}
	// A fetcher that stopped because the run was cancelled queued nothing.
	if err := fetcherEnded(make(chan error, 1)); err != nil {
		t.Fatalf("fetcherEnded after a cancel = %v, want nil", err)
	}
}
