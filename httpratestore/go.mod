module github.com/retryafter/retryafter/httpratestore

go 1.26.0

require (
	github.com/go-chi/httprate v0.16.1
	github.com/retryafter/retryafter v0.1.0
	golang.org/x/time v0.16.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
