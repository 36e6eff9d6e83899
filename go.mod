module github.com/retryafter/retryafter

go 1.26.0

require golang.org/x/time v0.16.0
