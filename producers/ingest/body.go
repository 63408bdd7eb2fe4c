package ingest

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// This file reads the request bodies of /v1/events and /v1/traces: within
// ReadTimeout, capped at MaxBody raw bytes and, for Content-Encoding gzip,
// at MaxBody inflated bytes.

// errDecompressedTooLarge is returned by readBody when a gzip body inflates
// past the cap.
var errDecompressedTooLarge = errors.New("decompressed body over the cap")

// errBadContentEncoding is returned by readBody for a Content-Encoding other
// than gzip or identity.
var errBadContentEncoding = errors.New("unsupported Content-Encoding")

// readBody reads a request body (already capped in raw bytes by the caller)
// and, for Content-Encoding gzip, inflates it up to max bytes.
func readBody(r io.Reader, contentEncoding string, max int64) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(contentEncoding)) {
	case "", "identity":
		return io.ReadAll(r)
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		b, err := io.ReadAll(io.LimitReader(zr, max+1))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if int64(len(b)) > max {
			return nil, errDecompressedTooLarge
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w %q: send gzip or no Content-Encoding", errBadContentEncoding, contentEncoding)
}

// hold is the in-flight bytes a request takes: the most it may send, its
// Content-Length but at least MinHold (what a stalled connection costs
// whatever it declares), or MaxBody when its length is unknown or it is
// compressed (it may inflate up to MaxBody).
func (s *Server) hold(r *http.Request) int64 {
	if r.ContentLength >= 0 && r.Header.Get("Content-Encoding") == "" {
		return max(r.ContentLength, s.cfg.MinHold)
	}
	return s.cfg.MaxBody
}

// readRequestBody reads r's body within ReadTimeout (a connection's read
// deadline, set through http.ResponseController), then lifts the deadline:
// while the events wait for the brokers the server watches the connection
// for a client that goes away, and a deadline passing there would cancel the
// request.
func (s *Server) readRequestBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	// ErrNotSupported (a handler served by a foreign server) leaves the
	// server's own deadlines.
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody), r.Header.Get("Content-Encoding"), s.cfg.MaxBody)
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, err
}

// bodyFailure is how a failed body read is answered.
type bodyFailure struct {
	code   int
	reason string
	msg    string
}

// classifyBodyError maps a readRequestBody error to its answer. A 408 also
// closes the connection (its body is not read to the end).
func (s *Server) classifyBodyError(w http.ResponseWriter, err error) bodyFailure {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return bodyFailure{http.StatusRequestEntityTooLarge, reasonTooLarge, fmt.Sprintf("request body is over the %d-byte cap", s.cfg.MaxBody)}
	case errors.Is(err, errDecompressedTooLarge):
		return bodyFailure{http.StatusRequestEntityTooLarge, reasonTooLarge, fmt.Sprintf("decompressed request body is over the %d-byte cap", s.cfg.MaxBody)}
	case errors.Is(err, errBadContentEncoding):
		return bodyFailure{http.StatusUnsupportedMediaType, reasonMediaType, err.Error()}
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		w.Header().Set("Connection", "close")
		return bodyFailure{http.StatusRequestTimeout, reasonTimeout, fmt.Sprintf("request body not received within %s (the read timeout): send it faster, or smaller requests", s.cfg.ReadTimeout)}
	}
	return bodyFailure{http.StatusBadRequest, reasonInvalid, "read body: " + err.Error()}
}
