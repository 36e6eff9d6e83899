package main

import (
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestClients: of calls made at once beyond the burst, a client with no retry policy sees
// refusals, and one whose retry policy obeys the pushback gets every call through.
func TestClients(t *testing.T) {
	const policy = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
	  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
	  "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	for _, c := range []struct {
		name    string
		opt     grpc.DialOption
		every   time.Duration // a token per every
		refused bool
	}{
		{"no retries", grpc.WithDisableRetry(), time.Hour, true},
		{"retry policy", grpc.WithDefaultServiceConfig(policy), 50 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := newServer(newLimiter("", rate.Every(c.every), 2))
			go srv.Serve(lis)
			defer srv.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), c.opt, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := healthpb.NewHealthClient(conn)
			var mu sync.Mutex
			refused := 0
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					_, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{})
					mu.Lock()
					defer mu.Unlock()
					if status.Code(err) == codes.ResourceExhausted {
						refused++
					} else if err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if (refused > 0) != c.refused {
				t.Fatalf("%d of 4 calls refused", refused)
			}
		})
	}
}
