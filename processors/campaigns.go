package processors

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/harnessflow/harnessflow/internal/kafkax"
	"github.com/harnessflow/harnessflow/internal/retry"
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

// follow reads every partition of hf.campaigns until ctx ends. An invalid
// declaration is dead-lettered once (hf.dlq, like every bad input; its id
// derives from its coordinates, so a copy written twice is one row
// downstream): every instance reads the whole topic, so the offset up to
// which the deployment has dead-lettered is kept as the committed offset of
// the group Config.Group+"-campaigns" (commits only, never joined). A bad
// record below it is counted and logged at debug level, not dead-lettered or
// warned about again at every restart. Two instances that meet the same new
// bad record at once may both write it (same event id).
func (t *campaignTable) follow(ctx context.Context, client *kafka.Client, cfg *Config, dec *schemas.Decoder, m *metrics, log zerolog.Logger, parts []int) error {
	dl := newCampaignDLQ(ctx, client, cfg, log, parts)
	// owned: the fetchers and their restart timers, all ended by ctx,
	// which has ended when follow returns.
	var owned sync.WaitGroup
	defer owned.Wait()
	ch := make(chan fetched, len(parts))
	streams := make([]*stream, len(parts))
	// next is where each partition's fetcher starts again after it gave up
	// (-1: the log start); restarts pace them.
	next := make([]int64, len(parts))
	restarts := make([]*retry.Restarts, len(parts))
	start := func(i int) {
		f := &fetcher{client: client, cfg: cfg, topic: schemas.TopicCampaigns, part: parts[i], idx: i, decode: true, dec: dec, m: m}
		owned.Add(1)
		go func() { defer owned.Done(); f.run(ctx, next[i], streams[i].want, ch) }()
		streams[i].want <- struct{}{}
	}
	for i := range parts {
		streams[i] = &stream{topic: schemas.TopicCampaigns, want: make(chan struct{}, 1), hwm: -1}
		next[i] = -1
		restarts[i] = retry.NewRestarts(retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second})
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
			d := restarts[f.stream].Next()
			log.Warn().Err(f.err).Int("partition", parts[f.stream]).Dur("retry_in", d).
				Msg("campaign declarations: fetch failed; reading the partition again from where it stopped")
			owned.Add(1)
			go func(i int) {
				defer owned.Done()
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
		restarts[f.stream].Reset()
		next[f.stream] = f.next
		var bad []kafka.Message
		for _, msg := range f.msgs {
			m.eventsIn.WithLabelValues(msg.topic).Inc()
			if msg.rej == nil {
				if r := checkSyntax(msg.topic, msg.ev, cfg.Limits); r != nil {
					msg.rej = r
				}
			}
			if msg.rej != nil {
				lev := log.Debug()
				if dl.due(msg.partition, msg.offset) {
					m.rejected(msg.rej)
					lev = log.Warn()
					if d, err := deadLetter(msg, msg.rej, cfg.DLQPayloadCap); err != nil {
						m.encodeErrors.Inc()
						log.Error().Err(err).Int("partition", msg.partition).Int64("offset", msg.offset).Msg("dead letter does not encode; not published")
					} else {
						bad = append(bad, d)
					}
				}
				lev.Str("topic", msg.topic).Int("partition", msg.partition).Int64("offset", msg.offset).
					Str("stage", msg.rej.stage).Str("code", msg.rej.code).Msg(msg.rej.msg)
				continue
			}
			t.put(msg.ev.(*schemas.CampaignDeclared))
		}
		if len(bad) > 0 {
			dl.publish(ctx, parts[f.stream], bad, f.next)
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

// campaignDLQ dead-letters invalid hf.campaigns records once per deployment
// (campaignTable.follow): from holds, per partition, the offset up to which
// bad records were already dead-lettered (the group's committed offset,
// read at start).
type campaignDLQ struct {
	client *kafka.Client
	group  string
	out    *outWriter
	log    zerolog.Logger
	from   map[int]int64
}

// campaignDLQGroup is the group whose committed offsets on hf.campaigns say
// up to where invalid declarations were dead-lettered.
func campaignDLQGroup(cfg *Config) string { return cfg.Group + "-campaigns" }

func newCampaignDLQ(ctx context.Context, client *kafka.Client, cfg *Config, log zerolog.Logger, parts []int) *campaignDLQ {
	d := &campaignDLQ{client: client, group: campaignDLQGroup(cfg), out: newOutWriter(client), log: log, from: map[int]int64{}}
	want := map[string]map[int]int64{schemas.TopicCampaigns: {}}
	for _, p := range parts {
		want[schemas.TopicCampaigns][p] = 0
	}
	var got map[string]map[int]int64
	err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, MaxElapsed: 10 * time.Second}, func() error {
		var err error
		got, err = kafkax.Committed(ctx, client, d.group, want)
		return err
	}, nil)
	if err != nil {
		// Not known: dead-letter what is bad again (same ids, one row
		// downstream) rather than lose a dead letter.
		log.Warn().Err(err).Str("group", d.group).Msg("campaign declarations: cannot read up to where invalid ones were dead-lettered; dead-lettering every invalid one read")
		return d
	}
	for p, off := range got[schemas.TopicCampaigns] {
		if off > 0 {
			d.from[p] = off
		}
	}
	return d
}

// due reports whether the bad record at offset of partition is not
// dead-lettered yet.
func (d *campaignDLQ) due(partition int, offset int64) bool { return offset >= d.from[partition] }

// publish writes the dead letters of partition's records up to next (the
// offset after the fetch) and then commits next for the group. A failure is
// logged: the records are dead-lettered again at the next start.
func (d *campaignDLQ) publish(ctx context.Context, partition int, msgs []kafka.Message, next int64) {
	if err := d.out.write(ctx, msgs); err != nil {
		d.log.Error().Err(err).Int("partition", partition).Int("dead_letters", len(msgs)).
			Msg("campaign declarations: dead letters not written; written at the next start")
		return
	}
	res, err := d.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: d.group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{schemas.TopicCampaigns: {{Partition: partition, Offset: next}}}})
	if err == nil {
		for _, ps := range res.Topics {
			for _, p := range ps {
				if p.Error != nil {
					err = p.Error
				}
			}
		}
	}
	if err != nil {
		d.log.Warn().Err(err).Str("group", d.group).Int("partition", partition).
			Msg("campaign declarations: dead letters written, but not recorded; written again (same ids) at the next start")
		return
	}
	d.from[partition] = next
}
