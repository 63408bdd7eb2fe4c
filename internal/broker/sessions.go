package broker

import (
	"context"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sessions enforces consumer-group session timeouts for the embedded broker.
//
// kfake re-arms a member's session timer when it answers the member's
// JoinGroup. A member that dies while its JoinGroup waits for a rebalance
// (a consumer SIGKILLed during start-up) never gets that answer, so no timer
// is armed; when the group's leader then syncs, the pending-sync barrier that
// would have removed it is cleared too. The dead member keeps its share of
// the partitions for good and the live members never consume them (a
// trainer killed mid-join left half of hf.samples unread in the chaos
// campaign). Real Kafka evicts such a member after its session timeout.
//
// sessions watches the group requests the broker receives (without handling
// them) and records when each member was last heard from; members it has
// not heard from yet (a first JoinGroup carries no member id) it learns by
// describing the groups. It sends a LeaveGroup on behalf of a member silent
// for longer than its session (or rebalance, if longer) timeout plus a
// margin: the eviction Kafka would have done. A member whose JoinGroup with
// its id was never seen is given the assumed timeout (Config). A live
// member that stalls past its session timeout is evicted as Kafka would
// evict it, and it rejoins.
type sessions struct {
	addr    string
	client  *kafka.Client
	assumed time.Duration // timeout of a member whose JoinGroup was not seen

	mu      sync.Mutex
	members map[groupMember]*memberSeen

	stop chan struct{}
	done chan struct{}
}

type groupMember struct{ group, member string }

type memberSeen struct {
	last    time.Time
	timeout time.Duration
}

const (
	// sessionMargin is added to a member's timeout before it is evicted.
	sessionMargin = 2 * time.Second
	// sessionSweep is how often silent members are looked for.
	sessionSweep = time.Second
	// DefaultAssumedSessionTimeout is Config.AssumedSessionTimeout's
	// default (Kafka's default session.timeout.ms).
	DefaultAssumedSessionTimeout = 45 * time.Second
)

func watchSessions(c *kfake.Cluster, addr string, assumed time.Duration, transport *kafka.Transport) *sessions {
	if assumed <= 0 {
		assumed = DefaultAssumedSessionTimeout
	}
	s := &sessions{
		addr:    addr,
		assumed: assumed,
		client:  &kafka.Client{Addr: kafka.TCP(addr), Timeout: 5 * time.Second},
		members: map[groupMember]*memberSeen{},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if transport != nil {
		s.client.Transport = transport
	}
	observe := func(key kmsg.Key, fn func(kmsg.Request)) {
		c.ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
			fn(r)
			return nil, nil, false // observed, not handled: the broker answers
		})
	}
	observe(kmsg.JoinGroup, func(r kmsg.Request) {
		req, ok := r.(*kmsg.JoinGroupRequest)
		if !ok || req.MemberID == "" {
			return // the first join of a member asks for its id
		}
		timeout := time.Duration(max(req.SessionTimeoutMillis, req.RebalanceTimeoutMillis)) * time.Millisecond
		s.heard(req.Group, req.MemberID, timeout)
	})
	observe(kmsg.SyncGroup, func(r kmsg.Request) {
		if req, ok := r.(*kmsg.SyncGroupRequest); ok {
			s.heard(req.Group, req.MemberID, 0)
		}
	})
	observe(kmsg.Heartbeat, func(r kmsg.Request) {
		if req, ok := r.(*kmsg.HeartbeatRequest); ok {
			s.heard(req.Group, req.MemberID, 0)
		}
	})
	observe(kmsg.OffsetCommit, func(r kmsg.Request) {
		if req, ok := r.(*kmsg.OffsetCommitRequest); ok && req.MemberID != "" {
			s.heard(req.Group, req.MemberID, 0)
		}
	})
	observe(kmsg.LeaveGroup, func(r kmsg.Request) {
		req, ok := r.(*kmsg.LeaveGroupRequest)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.members, groupMember{req.Group, req.MemberID})
		for _, m := range req.Members {
			delete(s.members, groupMember{req.Group, m.MemberID})
		}
	})
	go s.sweep()
	return s
}

// heard records that member of group sent a request now; timeout > 0 sets
// its session timeout (from its JoinGroup).
func (s *sessions) heard(group, member string, timeout time.Duration) {
	if group == "" || member == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := groupMember{group, member}
	m := s.members[k]
	if m == nil {
		m = &memberSeen{timeout: s.assumed}
		s.members[k] = m
	}
	m.last = time.Now()
	if timeout > 0 {
		m.timeout = timeout
	}
}

func (s *sessions) sweep() {
	defer close(s.done)
	t := time.NewTicker(sessionSweep)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.discover()
		now := time.Now()
		var silent []groupMember
		s.mu.Lock()
		for k, m := range s.members {
			if now.Sub(m.last) > m.timeout+sessionMargin {
				silent = append(silent, k)
				delete(s.members, k)
			}
		}
		s.mu.Unlock()
		for _, k := range silent {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// UNKNOWN_MEMBER_ID (the broker evicted it already) is fine.
			_, _ = s.client.LeaveGroup(ctx, &kafka.LeaveGroupRequest{GroupID: k.group,
				Members: []kafka.LeaveGroupRequestMember{{ID: k.member}}})
			cancel()
		}
	}
}

// discover adds the members of every group that the watch has not heard
// from, as heard from now.
func (s *sessions) discover() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lg, err := s.client.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil || len(lg.Groups) == 0 {
		return
	}
	var ids []string
	for _, g := range lg.Groups {
		ids = append(ids, g.GroupID)
	}
	dg, err := s.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: ids})
	if err != nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range dg.Groups {
		for _, m := range g.Members {
			k := groupMember{g.GroupID, m.MemberID}
			if _, ok := s.members[k]; !ok {
				s.members[k] = &memberSeen{last: now, timeout: s.assumed}
			}
		}
	}
}

// close stops the sweeper (before the cluster closes).
func (s *sessions) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}
