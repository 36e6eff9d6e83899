package redisstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScriptSources checks that every script, assembled from state.lua's blocks, has every block
// in place and defines no Lua function, which Redis would make anew on every call (state.lua).
// With SCRIPTS_OUT set to a directory, it writes the scripts there, for scriptcost.sh.
func TestScriptSources(t *testing.T) {
	for name, src := range map[string]string{"decide": decideLua, "charge": chargeLua, "all": allLua, "lease": leaseLua} {
		s := assemble(src)
		var code strings.Builder // s without its comments
		for line := range strings.Lines(s) {
			if c, _, _ := strings.Cut(line, "--"); strings.TrimSpace(c) != "" {
				code.WriteString(c + "\n")
			}
		}
		for _, bad := range []string{"{{", "}}", "function"} {
			if strings.Contains(code.String(), bad) {
				t.Errorf("%s.lua, assembled, has %q", name, bad)
			}
		}
		if !strings.Contains(s, "redis.call('GET', key)") || !strings.Contains(s, "redis.call('TIME')") {
			t.Errorf("%s.lua, assembled, does not read the state at Redis's clock", name)
		}
		if dir := os.Getenv("SCRIPTS_OUT"); dir != "" {
			if err := os.WriteFile(filepath.Join(dir, name+".lua"), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
