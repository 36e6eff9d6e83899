module github.com/retryafter/retryafter

go 1.26.0

require golang.org/x/time v0.16.0

require github.com/go-chi/chi/v5 v5.5.0 // the examples mount the middleware in chi; tests only
