package schemas

import (
	"context"
	"testing"
)

func BenchmarkEncode(b *testing.B) {
	fx := fixturesV1()
	for _, typ := range AllTypes {
		ev := fx[typ]
		b.Run(string(typ), func(b *testing.B) {
			buf, err := AppendEncode(nil, ev)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if buf, err = AppendEncode(buf[:0], ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	fx := fixturesV1()
	for _, typ := range AllTypes {
		buf, err := Encode(fx[typ])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(typ), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Decode(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkGoavroEncode is the reference: goavro's native-map encoding of
// task_attempt, which the hand codec replaces on the hot path.
func BenchmarkGoavroEncode(b *testing.B) {
	ev := fixturesV1()[TypeTaskAttempt]
	codec := infos[TypeTaskAttempt].current.codec
	b.ReportAllocs()
	var buf []byte
	for i := 0; i < b.N; i++ {
		native, _ := toNative(ev)
		var err error
		if buf, err = codec.SingleFromNative(buf[:0], native); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseJSON(b *testing.B) {
	j, _ := MarshalJSON(fixturesV1()[TypeTaskAttempt])
	b.SetBytes(int64(len(j)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ParseJSON(j, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	ev := fixturesV1()[TypeTaskAttempt]
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := Validate(ev, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeConfluent(b *testing.B) {
	_, srv := newFakeRegistry(b)
	r := NewRegistry(srv.URL, nil)
	buf, err := r.EncodeConfluent(context.Background(), fixturesV1()[TypeTaskAttempt])
	if err != nil {
		b.Fatal(err)
	}
	dec := &Decoder{Registry: r}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := dec.Decode(context.Background(), buf); err != nil {
			b.Fatal(err)
		}
	}
}
