module github.com/fenceguard/fenceguard

go 1.25

require (
	github.com/go-chi/chi/v5 v5.0.0
	go.uber.org/goleak v1.3.0
)
