module github.com/retryafter/retryafter/traefik

go 1.26.0

require (
	github.com/mitchellh/mapstructure v1.5.1-0.20231216201459-8508981c8b6c
	github.com/retryafter/retryafter v0.0.0
	github.com/traefik/yaegi v0.16.1
)

require golang.org/x/time v0.16.0 // indirect

replace github.com/retryafter/retryafter => ../
