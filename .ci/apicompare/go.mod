module apicompare

go 1.26.0

require (
	golang.org/x/exp v0.0.0-20260908205506-85c1c2202aba
	golang.org/x/tools v0.50.0
)

require (
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
