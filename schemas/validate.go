package schemas

import (
	"errors"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Validate checks the syntax rules of docs/design.md §3 on a typed event, whatever
// its origin (JSON, Avro, a Go caller): required identifying fields are
// non-empty, enum fields hold one of their symbols, numbers are in range
// (scores and phase scores in [0,1] and not NaN, effect in [-1,1], p_value in
// [0,1], label_epsilon in [0,1), label_alpha in (0,1), counts >= 0, attempt
// >= 1, every double finite), text is valid UTF-8 and under its Limits cap,
// every id and name is at most Limits.Name bytes (caps.go lists them), and
// the whole encoded event is under Limits.Event. It returns nil or every
// problem joined, each a *FieldError (errors.As finds the first). Safe for
// concurrent use.
func Validate(ev Event, lim Limits) error {
	ti, err := lookup(ev)
	if err != nil {
		return err
	}
	lim = lim.withDefaults()
	v := validator{t: ti.typ}
	h := ev.Header()
	v.name("event_id", h.EventID, lim.Name)
	v.time("event_time", h.EventTime)
	v.name("project", h.Project, lim.Name)
	v.name("source", h.Source, lim.Name)
	enumOK := true
	for i := range ti.fields {
		f := &ti.fields[i]
		v.bound += 16 // union index, array block counts
		switch f.kind {
		case kString, kNullString, kEnum:
			s := *f.str(ev)
			v.text(f.name, s)
			switch {
			case f.req && s == "":
				v.add(f.name, CodeMissingField, "required field "+strconv.Quote(f.name)+" is empty")
				enumOK = enumOK && f.kind != kEnum
			case f.kind == kEnum && symbolIndex(f.symbols, s) < 0:
				v.errs = append(v.errs, badEnum(ti.typ, f.name, s, f.symbols))
				enumOK = false
			}
			if f.capOf != nil {
				v.capped(f.name, len(s), f.capOf(lim))
			} else if f.kind != kEnum && !f.prose && len(s) > lim.Name {
				v.nameCap(f.name, len(s), lim.Name)
			}
		case kInt:
			v.integer(f.name, int64(*f.i32(ev)), f.rule)
		case kLong:
			v.integer(f.name, *f.i64(ev), f.rule)
		case kDouble:
			v.double(f.name, *f.f64(ev), f.rule)
		case kNullDouble:
			if p := *f.pf64(ev); p != nil {
				v.double(f.name, *p, f.rule)
			}
		case kTime:
			v.time(f.name, *f.tm(ev))
		case kStrings:
			for j, s := range *f.strs(ev) {
				v.bound += len(s) + 10
				if !utf8.ValidString(s) { // name the element only when it is bad
					v.add(f.name+"["+strconv.Itoa(j)+"]", CodeMalformed, "invalid UTF-8")
				}
				if len(s) > lim.Name {
					v.nameCap(f.name+"["+strconv.Itoa(j)+"]", len(s), lim.Name)
				}
			}
		case kArtifacts:
			for j, a := range *f.arts(ev) {
				p := f.name + "[" + strconv.Itoa(j) + "]."
				if symbolIndex(artifactKinds, a.Kind) < 0 {
					v.errs = append(v.errs, badEnum(ti.typ, p+"kind", a.Kind, artifactKinds))
					enumOK = false
				}
				if symbolIndex(artifactOps, a.Op) < 0 {
					v.errs = append(v.errs, badEnum(ti.typ, p+"op", a.Op, artifactOps))
					enumOK = false
				}
				if a.Name == "" {
					v.add(p+"name", CodeMissingField, "required field "+strconv.Quote(p+"name")+" is empty")
				}
				v.bound += 32 + len(a.ContentSHA256) // kind, op, sha256
				v.name(p+"name", a.Name, lim.Name)
				v.text(p+"content", a.Content)
				v.capped(p+"content", len(a.Content), lim.ArtifactContent)
				if a.ContentSHA256 != "" && !isSHA256Hex(a.ContentSHA256) {
					v.add(p+"content_sha256", CodeMalformed, strconv.Quote(a.ContentSHA256)+" is not 64 lowercase hex digits")
				}
			}
		case kOffsets:
			for j, o := range *f.offs(ev) {
				p := f.name + "[" + strconv.Itoa(j) + "]."
				if o.Topic == "" {
					v.add(p+"topic", CodeMissingField, "required field "+strconv.Quote(p+"topic")+" is empty")
				}
				v.name(p+"topic", o.Topic, lim.Name)
				v.integer(p+"partition", int64(o.Partition), rNonNeg)
				v.integer(p+"offset", o.Offset, rNonNeg)
			}
		case kMetrics:
			for k, x := range *f.mets(ev) {
				v.name(f.name+"."+k, k, lim.Name)
				v.double(f.name+"."+k, x, rNone)
			}
		case kBytes:
			v.bound += len(*f.byts(ev)) + 10
			if f.capOf != nil {
				v.capped(f.name, len(*f.byts(ev)), f.capOf(lim))
			}
		}
	}
	// Encoding is the exact size check but costs as much as the encode the
	// caller does next; skip it when an upper bound of the size is under the cap.
	if enumOK && v.bound+10 > lim.Event {
		buf := encBufs.Get().(*[]byte)
		b, err := appendBody((*buf)[:0], ti, ev)
		if err == nil && len(b)+10 > lim.Event {
			v.add("", CodeTooLarge, "event is "+strconv.Itoa(len(b)+10)+" bytes, above the "+strconv.Itoa(lim.Event)+"-byte cap")
		}
		if cap(b) <= 1<<20 {
			*buf = b
			encBufs.Put(buf)
		}
	}
	return joinErrs(v.errs)
}

var encBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// joinErrs is errors.Join, returning the single error itself when alone.
func joinErrs(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

type validator struct {
	t    Type
	errs []error
	// bound is an upper bound of the event's Avro body size, summed as fields
	// are checked.
	bound int
}

func (v *validator) add(field, code, msg string) {
	v.errs = append(v.errs, &FieldError{Type: v.t, Field: field, Code: code, Msg: msg})
}

func (v *validator) text(field, s string) {
	v.bound += len(s) + 10
	if !utf8.ValidString(s) {
		v.add(field, CodeMalformed, "invalid UTF-8")
	}
}

// name checks an id or a name: valid UTF-8, at most limit bytes.
func (v *validator) name(field, s string, limit int) {
	v.text(field, s)
	if len(s) > limit {
		v.nameCap(field, len(s), limit)
	}
}

func (v *validator) nameCap(field string, n, limit int) {
	v.add(field, CodeTooLarge, strconv.Itoa(n)+" bytes, above the "+strconv.Itoa(limit)+
		"-byte cap on ids and names (schemas.DefaultNameCap): shorten it, or hash a longer natural key")
}

func (v *validator) capped(field string, n, limit int) {
	if n > limit {
		v.add(field, CodeTooLarge, strconv.Itoa(n)+" bytes, above the "+strconv.Itoa(limit)+"-byte cap")
	}
}

func (v *validator) time(field string, t time.Time) {
	v.bound += 10
	if !t.IsZero() && (t.Year() < 1 || t.Year() > 9999) {
		v.add(field, CodeOutOfRange, "year "+strconv.Itoa(t.Year())+" is outside 1..9999")
	}
}

func (v *validator) integer(field string, n int64, r rule) {
	v.bound += 10
	if n >= 1 || (n >= 0 && r != rPos) || (n == -1 && r == rMinus1) || r == rNone {
		return
	}
	s := strconv.FormatInt(n, 10)
	switch {
	case r == rNonNeg && n < 0:
		v.add(field, CodeOutOfRange, s+" is negative")
	case r == rPos && n < 1:
		v.add(field, CodeOutOfRange, s+" is below 1")
	case r == rMinus1 && n < -1:
		v.add(field, CodeOutOfRange, s+" is below -1")
	}
}

// ruleRange returns the bounds of a double rule and their notation.
func ruleRange(r rule) (lo, hi float64, loOpen, hiOpen bool, text string) {
	switch r {
	case rUnit:
		return 0, 1, false, false, "[0,1]"
	case rSigned:
		return -1, 1, false, false, "[-1,1]"
	case rPercent:
		return 0, 100, false, false, "[0,100]"
	case rPP:
		return -100, 100, false, false, "[-100,100]"
	case rEpsilon:
		return 0, 1, false, true, "[0,1)"
	case rAlpha:
		return 0, 1, true, true, "(0,1)"
	}
	return math.Inf(-1), math.Inf(1), true, true, ""
}

func (v *validator) double(field string, x float64, r rule) {
	v.bound += 10
	if r == rNone && !math.IsNaN(x) && !math.IsInf(x, 0) {
		return
	}
	lo, hi, loOpen, hiOpen, text := ruleRange(r)
	finite := !math.IsNaN(x) && !math.IsInf(x, 0)
	if finite && (text == "" || !(x < lo || x > hi || (loOpen && x == lo) || (hiOpen && x == hi))) {
		return // valid: format nothing
	}
	s := strconv.FormatFloat(x, 'g', -1, 64)
	if !finite {
		if text == "" {
			v.add(field, CodeOutOfRange, s+" is not a finite number")
		} else {
			v.add(field, CodeOutOfRange, s+" is outside "+text)
		}
		return
	}
	if text == "" {
		return
	}
	if x < lo || x > hi || (loOpen && x == lo) || (hiOpen && x == hi) {
		v.add(field, CodeOutOfRange, s+" is outside "+text)
	}
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
