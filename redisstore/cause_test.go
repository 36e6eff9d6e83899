package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestOutageSaysWhy decides against a Redis that is not there, at the store's default timeout,
// and wants each error to say what the connection met, wrapped, rather than only the deadline
// that go-redis's dials in the background reach: a port nobody listens on refuses; a server
// killed under the store closes its connections and then refuses.
func TestOutageSaysWhy(t *testing.T) {
	t.Run("nobody listens", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		s := New(newClient(t, addr), rate.Every(time.Second), 5)
		for i := range 3 {
			_, err := s.Decide(context.Background(), "k", 1, time.Time{})
			t.Logf("decision %d: %v", i, err)
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("decision %d: %v, want ErrUnavailable wrapping the refused connection", i, err)
			}
		}
	})
	t.Run("killed", func(t *testing.T) {
		srv := startServer(t)
		s := New(newClient(t, srv.Addr()), rate.Every(time.Second), 5)
		decide(t, s, "k", 1, time.Time{})
		srv.Stop(syscall.SIGKILL)
		for i := range 3 {
			_, err := s.Decide(context.Background(), "k", 1, time.Time{})
			t.Logf("decision %d: %v", i, err)
			says := strings.Contains(err.Error(), "refused") || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset")
			if !errors.Is(err, ErrUnavailable) || !says {
				t.Fatalf("decision %d: %v, want ErrUnavailable saying what the connection met", i, err)
			}
		}
	})
}
