package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A fleet is the clients that load one server: each has one keep-alive connection of its own
// and sends GET requests one after the other (a closed loop). Connections outlive each slice.
type fleet struct {
	clients []*http.Client
	url     string
	dials   atomic.Int64
}

// newFleet returns conns clients of url.
func newFleet(url string, conns int) *fleet {
	f := &fleet{url: url}
	var d net.Dialer
	for range conns {
		f.clients = append(f.clients, &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				f.dials.Add(1)
				return d.DialContext(ctx, network, addr)
			},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DisableCompression:  true,
		}})
	}
	return f
}

// close closes the clients' connections.
func (f *fleet) close() {
	for _, c := range f.clients {
		c.CloseIdleConnections()
	}
}

// A tally is what a fleet measured of its server.
type tally struct {
	n      int           // requests completed while measuring
	wall   time.Duration // how long it measured
	cpu    time.Duration // the server's CPU time meanwhile
	lat    []time.Duration
	status map[int]int // responses by status code
}

// add adds u's requests to t.
func (t *tally) add(u tally) {
	t.n += u.n
	t.wall += u.wall
	t.cpu += u.cpu
	t.lat = append(t.lat, u.lat...)
	if t.status == nil {
		t.status = map[int]int{}
	}
	for code, n := range u.status {
		t.status[code] += n
	}
}

// The phases of a slice: requests that complete while measuring are counted, the others not.
const (
	settling int32 = iota
	measuring
	stopping
)

// slice loads the server with every client for settle, then measures it for d: the requests
// that complete meanwhile, their latency, and the server's CPU time as cpu reads it before and
// after. With d = 0 it measures nothing.
func (f *fleet) slice(settle, d time.Duration, cpu func() (time.Duration, error)) (tally, error) {
	var phase atomic.Int32
	var wg sync.WaitGroup
	records := make([]tally, len(f.clients))
	errs := make([]error, len(f.clients))
	for i, c := range f.clients {
		wg.Go(func() {
			records[i], errs[i] = f.drive(c, &phase)
		})
	}
	time.Sleep(settle)
	var t tally
	var cpu0, cpu1 time.Duration
	var err0, err1 error
	if d > 0 {
		cpu0, err0 = cpu()
		t0 := time.Now()
		phase.Store(measuring)
		time.Sleep(d)
		cpu1, err1 = cpu()
		t.wall = time.Since(t0)
	}
	phase.Store(stopping)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return t, err
		}
		t.n += records[i].n
		t.lat = append(t.lat, records[i].lat...)
	}
	if err := firstErr(err0, err1); err != nil {
		return t, err
	}
	t.cpu = cpu1 - cpu0
	t.status = map[int]int{}
	for _, r := range records {
		for code, n := range r.status {
			t.status[code] += n
		}
	}
	return t, nil
}

// drive sends requests through c until phase is stopping, and records those that complete
// while it is measuring.
func (f *fleet) drive(c *http.Client, phase *atomic.Int32) (tally, error) {
	t := tally{lat: make([]time.Duration, 0, 1<<12), status: map[int]int{}}
	req, err := http.NewRequest(http.MethodGet, f.url, nil)
	if err != nil {
		return t, err
	}
	for phase.Load() != stopping {
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return t, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return t, fmt.Errorf("reading the body: %w", err)
		}
		elapsed := time.Since(start)
		if phase.Load() == measuring {
			t.n++
			t.lat = append(t.lat, elapsed)
			t.status[resp.StatusCode]++
		}
	}
	return t, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
