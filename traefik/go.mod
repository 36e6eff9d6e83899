module github.com/retryafter/retryafter/traefik

go 1.26.0

require (
	github.com/go-chi/httprate v0.16.1
	github.com/mitchellh/mapstructure v1.5.1-0.20231216201459-8508981c8b6c
	github.com/retryafter/retryafter v0.1.0
	github.com/traefik/yaegi v0.16.1
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/sys v0.30.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
