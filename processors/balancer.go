package processors

import (
	"sort"

	"github.com/segmentio/kafka-go"
)

// CoPartitionBalancer is a kafka-go GroupBalancer that assigns partition
// NUMBERS, not topic partitions: partition p of every subscribed topic goes
// to the same member. Stage A needs it because a cell's events are on the
// same partition number of each raw cell topic (all keyed by cell_id, equal
// partition counts). Numbers are split in contiguous ranges over the members
// sorted by id, so the assignment is deterministic.
type CoPartitionBalancer struct{}

// ProtocolName implements kafka.GroupBalancer.
func (CoPartitionBalancer) ProtocolName() string { return "hf-copartition" }

// UserData implements kafka.GroupBalancer.
func (CoPartitionBalancer) UserData() ([]byte, error) { return nil, nil }

// AssignGroups implements kafka.GroupBalancer.
func (CoPartitionBalancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := kafka.GroupMemberAssignments{}
	if len(members) == 0 {
		return out
	}
	ms := append([]kafka.GroupMember(nil), members...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	numSet := map[int]bool{}
	for _, p := range partitions {
		numSet[p.ID] = true
	}
	nums := make([]int, 0, len(numSet))
	for n := range numSet {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	owner := map[int]int{} // partition number -> member index
	for i, n := range nums {
		owner[n] = i * len(ms) / len(nums)
	}
	subscribed := func(m kafka.GroupMember, topic string) bool {
		for _, t := range m.Topics {
			if t == topic {
				return true
			}
		}
		return false
	}
	for _, m := range ms {
		out[m.ID] = map[string][]int{}
	}
	for _, p := range partitions {
		m := ms[owner[p.ID]]
		if !subscribed(m, p.Topic) {
			continue
		}
		out[m.ID][p.Topic] = append(out[m.ID][p.Topic], p.ID)
	}
	for _, a := range out {
		for t := range a {
			sort.Ints(a[t])
		}
	}
	return out
}
