package connectlimit

import (
	"net/http"
	"strings"
)

// TrailersOnly returns h, a Connect handler, answering a gRPC call that ends before its first
// message "trailers-only", in one HTTP/2 HEADERS frame, as a grpc-go server answers it. A
// grpc-go client's retry policy, which obeys the pushback of a refusal, retries only such an
// answer; connect-go on net/http sends the status as trailers after a frame of headers, which
// the client takes as the call having started, and never retries. Calls of the Connect and
// gRPC-Web protocols, and gRPC calls that send a message, pass through unchanged.
//
//	mux.Handle(path, connectlimit.TrailersOnly(handler))
func TrailersOnly(h http.Handler) http.Handler {
	if h == nil {
		panic("connectlimit: TrailersOnly(nil)")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isGRPC(r.Header.Get("Content-Type")) {
			h.ServeHTTP(w, r)
			return
		}
		tw := &trailersOnlyWriter{ResponseWriter: w}
		h.ServeHTTP(tw, r)
		tw.finish()
	})
}

// isGRPC reports whether contentType is the gRPC protocol's, not gRPC-Web's.
func isGRPC(contentType string) bool {
	return contentType == "application/grpc" || strings.HasPrefix(contentType, "application/grpc+") ||
		strings.HasPrefix(contentType, "application/grpc;")
}

// A trailersOnlyWriter holds back the header of a gRPC response until its body starts; when the
// handler returns before, it sends the trailers as headers, with the header, at once.
type trailersOnlyWriter struct {
	http.ResponseWriter
	code    int  // the status the handler wrote, 0 if none
	started bool // the body started: everything passes through
}

func (w *trailersOnlyWriter) WriteHeader(code int) {
	if w.started {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if w.code == 0 {
		w.code = code
	}
}

func (w *trailersOnlyWriter) Write(b []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(b)
}

// Flush implements [http.Flusher]: before the body, there is nothing to send yet.
func (w *trailersOnlyWriter) Flush() {
	if w.started {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap returns the ResponseWriter underneath, for [http.ResponseController].
func (w *trailersOnlyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// start sends the header held back, as it is, for a response with a body.
func (w *trailersOnlyWriter) start() {
	if w.started {
		return
	}
	w.started = true
	if w.code != 0 {
		w.ResponseWriter.WriteHeader(w.code)
	}
}

// finish sends a response without a body as trailers-only: each trailer a header.
func (w *trailersOnlyWriter) finish() {
	if w.started {
		return
	}
	h := w.Header()
	for k, v := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			delete(h, k)
			h[http.CanonicalHeaderKey(name)] = v
		}
	}
	delete(h, "Trailer")
	w.start()
}
