package obs

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestMuxServesMetricsHealthAndPprofOnlyWhenAsked(t *testing.T) {
	t.Setenv("HF_PPROF", "")
	mux := Mux(NewRegistry(), nil)
	if code, body := get(t, mux, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, mux, "/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") ||
		!strings.Contains(body, "\ngo_memstats_heap_inuse_bytes ") || !strings.Contains(body, "\ngo_gc_heap_live_bytes ") {
		t.Fatalf("/metrics = %d, go collector or its go_memstats_heap_inuse_bytes / go_gc_heap_live_bytes missing:\n%s", code, body)
	}
	if code, _ := get(t, mux, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/heap without HF_PPROF = %d, want 404", code)
	}
	t.Setenv("HF_PPROF", "1")
	mux = Mux(NewRegistry(), nil)
	if code, body := get(t, mux, "/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Fatalf("/debug/pprof/heap with HF_PPROF=1 = %d", code)
	}
}
