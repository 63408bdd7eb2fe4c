package main

import (
	"strings"
	"testing"
)

func TestTrainMemoryLimit(t *testing.T) {
	t.Parallel()
	const tensors = 268 << 20
	cases := []struct {
		flag, gomemlimit string
		tensors          int64
		want             int64
		why, err         string
	}{
		{flag: "auto", tensors: tensors, want: tensors + 128<<20, why: "auto"},
		{flag: "", tensors: tensors, want: tensors + 128<<20, why: "auto"},
		{flag: "auto", tensors: 0, want: 0, why: "device"},
		{flag: "auto", gomemlimit: "2GiB", tensors: tensors, want: 0, why: "GOMEMLIMIT"},
		{flag: "off", tensors: tensors, want: 0, why: "off"},
		{flag: "1GiB", tensors: tensors, want: 1 << 30, why: "flag"},
		{flag: "512MiB", gomemlimit: "2GiB", tensors: tensors, want: 512 << 20, why: "flag"},
		{flag: "300000000", tensors: tensors, want: 300000000, why: "flag"},
		{flag: "100MiB", tensors: tensors, err: "below the model's tensors"},
		{flag: "lots", tensors: tensors, err: "want auto, off or a size"},
		{flag: "-1GiB", tensors: tensors, err: "not a positive size"},
		{flag: "99999999999TiB", tensors: tensors, err: "too large"},
	}
	for _, c := range cases {
		got, why, err := trainMemoryLimit(c.flag, c.tensors, c.gomemlimit)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want one saying %q", c.flag, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%q (GOMEMLIMIT %q, tensors %d) = %d %q %v, want %d %q", c.flag, c.gomemlimit, c.tensors, got, why, err, c.want, c.why)
		}
	}
}
