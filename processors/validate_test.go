package processors

import (
	"reflect"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
)

func TestCheckFrontMatter(t *testing.T) {
	for _, c := range []struct{ content, want string }{
		{"---\nname: a\ndescription: does a\n---\nbody\n", ""},
		{"\ufeff---\nname: a\ndescription: does a\n---\n", ""},
		{"---\r\nname: a\ndescription: 'x'\n---\r\n", ""},
		{"# no front matter\n", `does not start`},
		{"---\nname: a\ndescription: b\n", "not closed"},
		{"---\nname: a\n---\nbody", `lacks "description"`},
		{"---\ndescription: b\n---\n", `lacks "name"`},
		{"---\nname: ''\ndescription: ' '\n---\n", `lacks "name" and "description"`},
		{"---\nname: [a, b]\ndescription: b\n---\n", `lacks "name"`},
		{"---\nname: a\n  description: : b\n---\n", "not YAML"},
		{"---\n- a\n- b\n---\n", "not YAML"},
	} {
		got := checkFrontMatter(c.content)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("checkFrontMatter(%q) = %q, want %q", c.content, got, c.want)
		}
	}
}

func TestCheckToolRegistry(t *testing.T) {
	for _, c := range []struct{ content, want string }{
		{"tools:\n  - name: grep\n    description: search\n  - name: ls\n", ""},
		{`{"tools": [{"name": "grep"}]}`, ""},
		{"tools: nope\n", `lacks a "tools" list`},
		{"other: 1\n", `lacks a "tools" list`},
		{"tools: []\n", "empty"},
		{"tools:\n  - grep\n", "tools[0] is not a mapping"},
		{"tools:\n  - name: a\n  - description: b\n", `tools[1] lacks a "name"`},
		{"- a\n", "not a YAML mapping"},
		{"tools: [\n", "not a YAML mapping"},
	} {
		got := checkToolRegistry(c.content)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("checkToolRegistry(%q) = %q, want %q", c.content, got, c.want)
		}
	}
}

func TestCoPartitionBalancer(t *testing.T) {
	var parts []kafka.Partition
	for _, topic := range CellTopics {
		for p := 0; p < 6; p++ {
			parts = append(parts, kafka.Partition{Topic: topic, ID: p})
		}
	}
	members := []kafka.GroupMember{{ID: "m-b", Topics: CellTopics}, {ID: "m-a", Topics: CellTopics}, {ID: "m-c", Topics: CellTopics}}
	got := CoPartitionBalancer{}.AssignGroups(members, parts)
	owner := map[int]string{}
	total := 0
	for m, topics := range got {
		if len(topics) != len(CellTopics) {
			t.Errorf("member %s got %d topics, want %d", m, len(topics), len(CellTopics))
		}
		for topic, ps := range topics {
			for _, p := range ps {
				total++
				if o, ok := owner[p]; ok && o != m {
					t.Errorf("partition %d of %s went to %s, but %s owns partition %d of another topic", p, topic, m, o, p)
				}
				owner[p] = m
			}
		}
	}
	if total != len(parts) {
		t.Errorf("assigned %d topic partitions, want %d", total, len(parts))
	}
	for _, m := range members {
		n := 0
		for _, o := range owner {
			if o == m.ID {
				n++
			}
		}
		if n != 2 {
			t.Errorf("member %s owns %d partition numbers, want 2", m.ID, n)
		}
	}
	// Deterministic: the same input in another order gives the same answer.
	again := CoPartitionBalancer{}.AssignGroups([]kafka.GroupMember{members[2], members[0], members[1]}, parts)
	if !reflect.DeepEqual(got, again) {
		t.Errorf("assignment changed with member order:\n%v\n%v", got, again)
	}
}

func TestConfigValidateJoinsProblems(t *testing.T) {
	c := Config{PendingMax: -1, BatchSize: -3, HeartbeatInterval: 20e9}
	c.setDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"no brokers", "pending max", "batch size", "heartbeat"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	ok := Config{Brokers: []string{"x:1"}}
	ok.setDefaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}
