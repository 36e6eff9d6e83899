package retryafter

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeClaimsNameTests checks that every test the security table of SECURITY.md names
// exists, in some module of the repository, so that a claim cannot outlive the test that holds
// it.
func TestReadmeClaimsNameTests(t *testing.T) {
	readme, err := os.ReadFile("SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(readme), -1)
	if len(named) < 10 {
		t.Fatalf("SECURITY.md names %d tests; its security table should name more", len(named))
	}
	var sources strings.Builder
	filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, _ := os.ReadFile(path)
			sources.Write(b)
		}
		return nil
	})
	for _, m := range named {
		if !strings.Contains(sources.String(), "func "+m[1]+"(") {
			t.Errorf("SECURITY.md names %s, which no test file defines", m[1])
		}
	}
}
