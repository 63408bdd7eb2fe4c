package processors

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/schemas"
)

// campaignTable is the global table of campaign declarations: every instance
// reads all of hf.campaigns from its start and keeps following it (no
// consumer group). Safe for concurrent use.
type campaignTable struct {
	mu    sync.RWMutex
	byKey map[string]*schemas.CampaignDeclared // project + "\x00" + campaign_id
	ready chan struct{}                        // closed once caught up with the end offsets read at start
	// version counts puts: a reader that saw version v and looked up after
	// that has a declaration at least as new as v's (put bumps it after the
	// write, under the lock), so it need not look again until it changes.
	version atomic.Uint64
}

func newCampaignTable() *campaignTable {
	return &campaignTable{byKey: map[string]*schemas.CampaignDeclared{}, ready: make(chan struct{})}
}

func (t *campaignTable) get(project, campaign string) *schemas.CampaignDeclared {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byKey[project+"\x00"+campaign]
}

func (t *campaignTable) put(c *schemas.CampaignDeclared) {
	t.mu.Lock()
	t.byKey[c.Project+"\x00"+c.CampaignID] = c
	t.version.Add(1)
	t.mu.Unlock()
}

// follow reads every partition of hf.campaigns until ctx ends. Invalid
// declarations are logged and counted, not dead-lettered: every instance
// reads the whole topic, and none owns it.
func (t *campaignTable) follow(ctx context.Context, client *kafka.Client, cfg *Config, m *metrics, log zerolog.Logger, parts []int) error {
	ch := make(chan fetched, len(parts))
	streams := make([]*stream, len(parts))
	// next is where each partition's fetcher starts again after it gave up
	// (-1: the log start); bos pace those restarts.
	next := make([]int64, len(parts))
	bos := make([]*backoff.ExponentialBackOff, len(parts))
	start := func(i int) {
		f := &fetcher{client: client, cfg: cfg, topic: schemas.TopicCampaigns, part: parts[i], idx: i, decode: true, m: m}
		go f.run(ctx, next[i], streams[i].want, ch)
		streams[i].want <- struct{}{}
	}
	for i := range parts {
		streams[i] = &stream{topic: schemas.TopicCampaigns, want: make(chan struct{}, 1), hwm: -1}
		next[i] = -1
		bos[i] = backoff.NewExponentialBackOff()
		bos[i].InitialInterval, bos[i].MaxInterval, bos[i].MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
		start(i)
	}
	restart := make(chan int)
	caught := make([]bool, len(parts))
	left := len(parts)
	if left == 0 {
		close(t.ready)
	}
	for {
		var f fetched
		select {
		case <-ctx.Done():
			return nil
		case i := <-restart:
			start(i)
			continue
		case f = <-ch:
		}
		if f.err != nil {
			// A broker outage longer than the fetcher's retry budget: the
			// declarations are needed for as long as the processor runs,
			// so the partition is read again from where it stopped, like
			// the stages' partitions are, instead of ending the run.
			m.fetchGaveUp.WithLabelValues(schemas.TopicCampaigns).Inc()
			d := bos[f.stream].NextBackOff()
			log.Warn().Err(f.err).Int("partition", parts[f.stream]).Dur("retry_in", d).
				Msg("campaign declarations: fetch failed; reading the partition again from where it stopped")
			go func(i int) {
				select {
				case <-time.After(d):
					select {
					case restart <- i:
					case <-ctx.Done():
					}
				case <-ctx.Done():
				}
			}(f.stream)
			continue
		}
		bos[f.stream].Reset()
		next[f.stream] = f.next
		for _, msg := range f.msgs {
			m.eventsIn.WithLabelValues(msg.topic).Inc()
			if msg.rej == nil {
				if r := checkSyntax(msg.topic, msg.ev, cfg.Limits); r != nil {
					msg.rej = r
				}
			}
			if msg.rej != nil {
				m.rejected(msg.rej)
				log.Warn().Str("topic", msg.topic).Int("partition", msg.partition).Int64("offset", msg.offset).
					Str("stage", msg.rej.stage).Str("code", msg.rej.code).Msg(msg.rej.msg)
				continue
			}
			t.put(msg.ev.(*schemas.CampaignDeclared))
		}
		if !caught[f.stream] && f.next >= f.hwm {
			caught[f.stream] = true
			if left--; left == 0 {
				close(t.ready)
			}
		}
		streams[f.stream].want <- struct{}{}
	}
}
