package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harnessflow/harnessflow/internal/testenv"
	"github.com/harnessflow/harnessflow/producers"
	"github.com/harnessflow/harnessflow/producers/producerstest"
	"github.com/harnessflow/harnessflow/schemas"
)

// budgetIdle says whether b holds nothing: every byte of the whole budget
// and of each project's share can be taken (and is given back at once), and
// no request is counted as being read or delivered.
func budgetIdle(b *budget) bool {
	if b.reading.Load() != 0 || b.delivering.Load() != 0 {
		return false
	}
	if !b.all.TryAcquire(b.max) {
		return false
	}
	b.all.Release(b.max)
	for _, pb := range b.projects {
		if pb.requests.Load() != 0 || !pb.sem.TryAcquire(b.perProject) {
			return false
		}
		pb.sem.Release(b.perProject)
	}
	return true
}

// FuzzEventsHandler fuzzes POST /v1/events through the gateway's whole
// handler (method, Authorization header, Content-Encoding and a body that
// may be gzipped first) against an embedded broker: the handler never
// panics, every answer is a status it documents, a 4xx or 5xx carries a
// JSON body (an {"error"} object or a list of {index, error}), a 202 says
// how many events were accepted and never answers a body holding one of the
// pipeline's derived types, and the in-flight budget (per project: tok-a
// and tok-a2 share projA's) is back to zero after every request.
func FuzzEventsHandler(f *testing.F) {
	b := testenv.Kafka(f)
	s, err := New(Config{
		Brokers: []string{b.Addr()}, Tokens: map[string]string{"tok-a": "projA", "tok-a2": "projA", "tok-b": "projB"},
		MaxBody: 64 << 10, MaxEvents: 50, DeliveryTimeout: 10 * time.Second,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.closeProducer)
	h := s.Handler()

	one := func(i int, project string) string {
		ev := producerstest.TaskAttempt(i, project)
		js, err := schemas.MarshalJSON(ev)
		if err != nil {
			f.Fatal(err)
		}
		return string(js)
	}
	f.Add(byte(0), byte(0), byte(0), []byte(one(1, "")))
	f.Add(byte(0), byte(1), byte(1), []byte("["+one(2, "projB")+","+one(3, "")+"]"))
	f.Add(byte(0), byte(0), byte(0), []byte(one(4, "projA")+"\n"+one(5, "projB")+"\n"))
	f.Add(byte(0), byte(2), byte(2), []byte(one(6, "")))
	f.Add(byte(0), byte(0), byte(3), []byte(`{"type":"task_attempt"`))
	f.Add(byte(1), byte(3), byte(0), []byte(`[]`))
	f.Add(byte(0), byte(4), byte(4), []byte(strings.Repeat("{}\n", 60)))
	f.Add(byte(0), byte(0), byte(0), []byte(`[{"type":"cell_started","cell_id":"`+strings.Repeat("x", 5000)+`"}]`))
	f.Add(byte(0), byte(0), byte(0), []byte("\xef\xbb\xbf[1,\"a\",null]"))
	for i, typ := range producerstest.DerivedTypes {
		js, err := schemas.MarshalJSON(producerstest.Derived(typ, 10+i, "projA"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(0), byte(7), byte(0), js)
		f.Add(byte(0), byte(0), byte(1), []byte(one(20+i, "")+"\n"+string(js)+"\n"))
	}

	methods := []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodDelete}
	auths := []string{"Bearer tok-a", "bearer tok-b", "", "Bearer nope", "BEARER   tok-a ", "Basic dG9rLWE=", "Bearer", "Bearer tok-a2"}
	statuses := map[int]bool{http.StatusAccepted: true, http.StatusBadRequest: true, http.StatusUnauthorized: true,
		http.StatusForbidden: true, http.StatusMethodNotAllowed: true, http.StatusRequestTimeout: true,
		http.StatusRequestEntityTooLarge: true, http.StatusUnsupportedMediaType: true, http.StatusServiceUnavailable: true}

	f.Fuzz(func(t *testing.T, method, auth, enc byte, body []byte) {
		payload := body
		var contentEncoding string
		switch enc % 5 {
		case 1: // a real gzip stream of the body
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(body)
			_ = zw.Close()
			payload, contentEncoding = buf.Bytes(), "gzip"
		case 2: // the body labelled gzip as it is
			contentEncoding = "gzip"
		case 3:
			contentEncoding = "br"
		case 4: // length unknown (as a chunked upload)
		}
		req := httptest.NewRequest(methods[int(method)%len(methods)], "/v1/events", bytes.NewReader(payload))
		if enc%5 == 4 {
			req.ContentLength = -1
		}
		if contentEncoding != "" {
			req.Header.Set("Content-Encoding", contentEncoding)
		}
		if a := auths[int(auth)%len(auths)]; a != "" {
			req.Header.Set("Authorization", a)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))

		if !statuses[rec.Code] {
			t.Fatalf("status %d is not one the gateway documents; body %q", rec.Code, rec.Body.String())
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("status %d with Content-Type %q, want application/json; body %q", rec.Code, ct, rec.Body.String())
		}
		if rec.Code == http.StatusAccepted {
			var ok struct {
				Accepted *int `json:"accepted"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &ok); err != nil || ok.Accepted == nil || *ok.Accepted < 1 {
				t.Fatalf("202 with body %q (%v), want {\"accepted\": N>=1}", rec.Body.String(), err)
			}
			items, _ := splitItems(body, 50)
			for _, it := range items {
				var head struct {
					Type schemas.Type `json:"type"`
				}
				if json.Unmarshal(it, &head) == nil && slices.Contains(schemas.AllTypes, head.Type) && !producers.IsProducerType(head.Type) {
					t.Fatalf("202 for a body holding a %s event: the derived types are the pipeline's own", head.Type)
				}
			}
		} else {
			var obj struct {
				Error string `json:"error"`
			}
			var list []ItemError
			if err := json.Unmarshal(rec.Body.Bytes(), &obj); err == nil && obj.Error != "" {
			} else if err := json.Unmarshal(rec.Body.Bytes(), &list); err == nil && len(list) > 0 && list[0].Error != "" {
			} else {
				t.Fatalf("status %d with body %q: want a JSON {\"error\"} or [{index, error}]", rec.Code, rec.Body.String())
			}
		}
		if !budgetIdle(s.inflight) {
			t.Fatalf("the in-flight budget is not back to zero after a %d answer", rec.Code)
		}
	})
}
