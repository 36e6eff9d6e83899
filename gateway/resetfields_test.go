package gateway

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryafter/retryafter/internal/header"
)

// TestNormalizerResetFields checks that a 429 or 503 whose Retry-After is missing or unusable
// gets the wait its first reset field to say one meant, as delay-seconds, and that the repair is
// reported with the field; that RetryAfterOnly turns this off; and that the fallback rules stay
// where no field says when.
func TestNormalizerResetFields(t *testing.T) {
	now := t0.Add(300 * time.Millisecond) // the gateway's clock
	upstream := t0.Add(time.Hour)         // an upstream whose clock is an hour fast
	epoch := func(d time.Duration) string { return strconv.FormatInt(upstream.Add(d).Unix(), 10) }
	upstreamDate := imfDate(upstream)
	tests := []struct {
		name     string
		status   int
		fields   http.Header // besides Date, which the upstream always sends
		only     bool        // RetryAfterOnly
		fill     bool        // FillMissing
		want     string      // the client's Retry-After; "" for an untouched response
		kind     RepairKind
		field    string
		lenient  Leniency
		maxWait  time.Duration
		understd time.Duration
	}{
		{name: "retry-after-ms", status: 429, fields: http.Header{"Retry-After-Ms": {"1200"}},
			want: "2", kind: RepairDerived, field: "Retry-After-Ms", understd: 1200 * time.Millisecond},
		{name: "x-ms-retry-after-ms", status: 503, fields: http.Header{"X-Ms-Retry-After-Ms": {"300"}},
			want: "1", kind: RepairDerived, field: "X-Ms-Retry-After-Ms", understd: 300 * time.Millisecond},
		{name: "RateLimit t", status: 429, fields: http.Header{"Ratelimit": {`"default";r=0;t=7`}},
			want: "7", kind: RepairDerived, field: "Ratelimit", understd: 7 * time.Second},
		{name: "RateLimit-Reset (tollbooth, draft 06)", status: 429, fields: http.Header{"Ratelimit-Reset": {"3"}},
			want: "3", kind: RepairDerived, field: "Ratelimit-Reset", understd: 3 * time.Second},
		{name: "X-RateLimit-Reset epoch (ulule, GitHub, Tyk)", status: 429, fields: http.Header{"X-Ratelimit-Reset": {epoch(10 * time.Second)}},
			want: "11", kind: RepairDerived, field: "X-Ratelimit-Reset", understd: 11 * time.Second},
		{name: "X-RateLimit-Reset seconds", status: 503, fields: http.Header{"X-Ratelimit-Reset": {"42"}},
			want: "42", kind: RepairDerived, field: "X-Ratelimit-Reset", understd: 42 * time.Second},
		{name: "X-RateLimit-Reset epoch this second", status: 429, fields: http.Header{"X-Ratelimit-Reset": {epoch(0)}},
			want: "1", kind: RepairDerived, field: "X-Ratelimit-Reset", lenient: LenientZero, understd: time.Second},
		{name: "unusable Retry-After, then a field", status: 429, fields: http.Header{"Retry-After": {"soon"}, "X-Ratelimit-Reset": {"9"}},
			want: "9", kind: RepairDerived, field: "X-Ratelimit-Reset", understd: 9 * time.Second},
		{name: "Retry-After wins", status: 429, fields: http.Header{"Retry-After": {"4"}, "X-Ratelimit-Reset": {"9"}},
			want: "4"},
		{name: "derived and clamped", status: 429, fields: http.Header{"X-Ratelimit-Reset": {"7200"}},
			want: "3600", kind: RepairClamped, field: "X-Ratelimit-Reset", understd: 2 * time.Hour},
		{name: "clamped to Max", status: 429, fields: http.Header{"Ratelimit": {`"day";r=0;t=80000`}}, maxWait: 30 * time.Second,
			want: "30", kind: RepairClamped, field: "Ratelimit", understd: 80000 * time.Second},
		{name: "RetryAfterOnly: untouched", status: 429, fields: http.Header{"X-Ratelimit-Reset": {"9"}}, only: true},
		{name: "RetryAfterOnly: fallback", status: 429, fields: http.Header{"X-Ratelimit-Reset": {"9"}}, only: true, fill: true,
			want: "5", kind: RepairMissing},
		{name: "RetryAfterOnly: invalid", status: 429, fields: http.Header{"Retry-After": {"soon"}, "X-Ratelimit-Reset": {"9"}}, only: true,
			want: "5", kind: RepairInvalid, field: ""},
		{name: "a field that says nothing: untouched", status: 429, fields: http.Header{"Ratelimit": {`"default";r=5;t=7`}}},
		{name: "a field that says nothing: fallback", status: 429, fields: http.Header{"X-Ratelimit-Reset": {epoch(-5 * time.Second)}}, fill: true,
			want: "5", kind: RepairMissing},
		{name: "OpenAI: only x-ratelimit-reset-requests", status: 429, fields: http.Header{"X-Ratelimit-Reset-Requests": {"6m0s"}},
			want: "360", kind: RepairDerived, field: "X-Ratelimit-Reset-Requests", understd: 6 * time.Minute},
		{name: "OpenAI: the spent limit's reset", status: 429, fields: http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Reset-Tokens": {"20ms"},
			"X-Ratelimit-Remaining-Requests": {"59"}, "X-Ratelimit-Remaining-Tokens": {"0"}},
			want: "1", kind: RepairDerived, field: "X-Ratelimit-Reset-Tokens", understd: 20 * time.Millisecond},
		{name: "Anthropic: RFC 3339 against the upstream's Date", status: 429, fields: http.Header{
			"Anthropic-Ratelimit-Tokens-Remaining": {"0"}, "Anthropic-Ratelimit-Tokens-Reset": {upstream.Add(171 * time.Second).Format(time.RFC3339)},
			"Anthropic-Ratelimit-Requests-Remaining": {"3"}, "Anthropic-Ratelimit-Requests-Reset": {upstream.Add(2 * time.Second).Format(time.RFC3339)}},
			want: "172", kind: RepairDerived, field: "Anthropic-Ratelimit-Tokens-Reset", understd: 172 * time.Second},
		{name: "GitHub: 403 with no requests left", status: 403, fields: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {epoch(10 * time.Second)}},
			want: "11", kind: RepairDerived, field: "X-Ratelimit-Reset", understd: 11 * time.Second},
		{name: "GitHub: 403 of a secondary limit", status: 403, fields: http.Header{"Retry-After": {"60"}, "X-Ratelimit-Remaining": {"4990"}, "X-Ratelimit-Reset": {epoch(time.Hour)}},
			want: "60"},
		{name: "GitHub: 403 with requests left: untouched", status: 403, fields: http.Header{"X-Ratelimit-Remaining": {"4990"}, "X-Ratelimit-Reset": {epoch(10 * time.Second)}}, fill: true},
		{name: "a 403 with Retry-After alone: untouched", status: 403, fields: http.Header{"Retry-After": {"soon"}}, fill: true},
		{name: "RateLimit a and w (after draft 11)", status: 429, fields: http.Header{"Ratelimit": {`"default";a=0;w=7`}},
			want: "7", kind: RepairDerived, field: "Ratelimit", understd: 7 * time.Second},
		{name: "not on a redirect", status: 302, fields: http.Header{"X-Ratelimit-Reset": {"9"}}},
		{name: "not on a 200", status: 200, fields: http.Header{"X-Ratelimit-Reset": {"9"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var repairs []Repair
			n := &Normalizer{Now: func() time.Time { return now }, Max: tt.maxWait, FillMissing: tt.fill, RetryAfterOnly: tt.only,
				OnRepair: func(r Repair) { repairs = append(repairs, r) }}
			resp := upstreamResponse(t, tt.status, nil, []string{upstreamDate})
			maps.Copy(resp.Header, tt.fields)
			before := resp.Header.Clone()
			n.ModifyResponse(resp)
			h := resp.Header
			if tt.want == "" {
				if !maps.EqualFunc(h, before, slices.Equal) || len(repairs) != 0 {
					t.Fatalf("header changed from %q to %q, repairs %+v; want it untouched", before, h, repairs)
				}
				return
			}
			if got := h["Retry-After"]; !slices.Equal(got, []string{tt.want}) {
				t.Errorf("client got Retry-After %q, want %q", got, tt.want)
			}
			if got := h["Date"]; !slices.Equal(got, []string{imfDate(now)}) {
				t.Errorf("client got Date %q, want the gateway's", got)
			}
			for name, v := range before { // the reset fields themselves pass on
				if name != "Retry-After" && name != "Date" && !slices.Equal(h[name], v) {
					t.Errorf("%s changed from %q to %q", name, v, h[name])
				}
			}
			if tt.kind == 0 {
				if len(repairs) != 0 {
					t.Errorf("repairs %+v for a conforming value", repairs)
				}
				return
			}
			if len(repairs) != 1 {
				t.Fatalf("repairs %+v, want one", repairs)
			}
			r := repairs[0]
			if r.Kind != tt.kind || r.Field != tt.field || r.Leniency != tt.lenient || r.Understood != tt.understd ||
				r.ClientRetryAfter != time.Duration(mustAtoi(t, tt.want))*time.Second {
				t.Errorf("repair %+v; want kind %v, field %q, leniency %v, understood %v", r, tt.kind, tt.field, tt.lenient, tt.understd)
			}
		})
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// FuzzNormalizerResetFields feeds the normalizer a 429 or 503 with no Retry-After and any value
// of one reset field and Date, and checks that it never panics, that the client gets exactly
// what header.ReadWait understood (rounded up to whole seconds, at least 1, clamped) with the
// gateway's Date, and that a response whose field says nothing usable passes untouched.
func FuzzNormalizerResetFields(f *testing.F) {
	f.Add(true, uint8(0), "1500", "")
	f.Add(false, uint8(1), `"default";r=0;t=30, "day";r=0;t=86400`, "")
	f.Add(true, uint8(2), "0", "")
	f.Add(true, uint8(3), "1796040010", "Sun, 29 Nov 2026 13:00:00 GMT")
	f.Add(false, uint8(3), "1796040000000.5", "Sun, 29 Nov 2026 12:00:00 UTC")
	f.Add(true, uint8(5), "6m0s", "")
	f.Add(true, uint8(7), "2026-11-29T13:02:51Z", "Sun, 29 Nov 2026 13:00:00 GMT")
	fields := [...]string{"Retry-After-Ms", "Ratelimit", "Ratelimit-Reset", "X-Ratelimit-Reset", "X-Ms-Retry-After-Ms",
		"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens", "Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Output-Tokens-Reset"}
	const maxWait = 90 * time.Second
	now := t0.Add(300 * time.Millisecond)
	f.Fuzz(func(t *testing.T, tooMany bool, which uint8, value, date string) {
		status := http.StatusServiceUnavailable
		if tooMany {
			status = http.StatusTooManyRequests
		}
		h := http.Header{fields[int(which)%len(fields)]: strings.Split(value, "\n")}
		if date != "" {
			h["Date"] = strings.Split(date, "\n")
		}
		before := h.Clone()
		meant := header.ReadWait(before, now, header.Refusal)
		n := &Normalizer{Now: func() time.Time { return now }, Max: maxWait}
		resp := &http.Response{StatusCode: status, Header: h, Body: unreadBody{t}}
		n.ModifyResponse(resp)
		if !meant.OK {
			if !maps.EqualFunc(resp.Header, before, slices.Equal) {
				t.Fatalf("%q: header changed to %q though nothing was understood", before, resp.Header)
			}
			return
		}
		if meant.Wait <= 0 {
			t.Fatalf("%q: ReadWait = %+v, no wait on a refusal", before, meant)
		}
		want := strconv.FormatInt(min(header.DelaySeconds(meant.Wait), int64(maxWait/time.Second)), 10)
		if got := resp.Header["Retry-After"]; !slices.Equal(got, []string{want}) {
			t.Fatalf("%q: client got Retry-After %q, want %q (%+v)", before, got, want, meant)
		}
		if got := resp.Header["Date"]; !slices.Equal(got, []string{imfDate(now)}) {
			t.Fatalf("client got Date %q", got)
		}
	})
}

// TestNormalizerNilHeader checks that a 429 with no header at all passes untouched by default
// and gets a header of its own with FillMissing.
func TestNormalizerNilHeader(t *testing.T) {
	resp := &http.Response{StatusCode: http.StatusTooManyRequests}
	new(Normalizer).ModifyResponse(resp)
	if resp.Header != nil {
		t.Errorf("header %q, want none", resp.Header)
	}
	(&Normalizer{Now: func() time.Time { return t0 }, FillMissing: true}).ModifyResponse(resp)
	if got := resp.Header["Retry-After"]; !slices.Equal(got, []string{"5"}) || resp.Header.Get("Date") != imfDate(t0) {
		t.Errorf("header %q, want Retry-After: 5 and the gateway's Date", resp.Header)
	}
}
