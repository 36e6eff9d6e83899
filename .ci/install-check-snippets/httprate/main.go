// httpratestore's package doc ("after"), as a user builds it.
package main

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/httpratestore"
)

func main() {
	r := chi.NewRouter()
	// snippet from httpratestore/store.go
	r.Use(retryafter.LimitWith(httpratestore.New(100, time.Minute, nil)))
	// end of snippet
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	http.ListenAndServe("127.0.0.1:8080", r)
}
