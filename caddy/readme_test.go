package retryaftercaddy

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/retryafter/retryafter/internal/testkit"
)

// readmeBlocks returns the fenced blocks of README.md in the language lang.
func readmeBlocks(t *testing.T, lang string) [][]byte {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]byte
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllSubmatch(readme, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatalf("no %s block in README.md", lang)
	}
	return blocks
}

// Every Caddyfile of the README is as caddy fmt writes it, so that Caddy does not warn of it at
// each start (CI also runs the built Caddy's caddy fmt --diff on them).
func TestREADMECaddyfilesAreFormatted(t *testing.T) {
	for _, b := range readmeBlocks(t, "caddyfile") {
		if got := caddyfile.Format(b); !bytes.Equal(got, b) {
			t.Errorf("caddy fmt would change\n%s\ninto\n%s", b, got)
		}
	}
}

// The README's JSON handlers decode strictly, as Caddy decodes them, and provision; the limit
// admits its burst rather than answering 503, whatever the date.
func TestREADMEJSONLoads(t *testing.T) {
	for _, b := range readmeBlocks(t, "json") {
		var handlers []json.RawMessage
		if err := json.Unmarshal(b, &handlers); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for _, raw := range handlers {
			var kind struct{ Handler string }
			if err := json.Unmarshal(raw, &kind); err != nil {
				t.Fatal(err)
			}
			// Caddy takes "handler" as the module's name, not as a field.
			var fields map[string]json.RawMessage
			_ = json.Unmarshal(raw, &fields)
			delete(fields, "handler")
			src, _ := json.Marshal(fields)
			switch kind.Handler {
			case "retry_after_limit":
				h := fromJSON[Limit](t, string(src))
				provision(t, h)
				if w := serveOnce(h); w != 200 {
					t.Errorf("the README's retry_after_limit answers %d to a first request", w)
				}
			case "retry_after_normalize":
				provision(t, fromJSON[Normalize](t, string(src)))
			}
		}
	}
}

// serveOnce sends one request through h, as a Caddy server hands it, and returns the status.
func serveOnce(h *Limit) int {
	return testkit.Serve(inCaddy(h), "GET", "192.0.2.1:1").Code
}
