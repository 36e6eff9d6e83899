// Package plugintest loads this module's plugins as Traefik does: it lays out a GOPATH tree with
// the plugins' packages and, vendored beside them, the packages they import from outside the
// standard library; interprets a plugin with Yaegi v0.16.1, the interpreter Traefik v3.6 embeds,
// given the standard library's symbols; decodes its configuration with mapstructure, as Traefik
// does; and calls its New.
package plugintest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mitchellh/mapstructure"
	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"
)

// Module is the module path of the plugins, under which Traefik finds them in its plugins-local
// tree.
const Module = "github.com/retryafter/retryafter/traefik"

// A Plugin is a plugin's package as Traefik's interpreter holds it.
type Plugin struct {
	newFn, createConfig reflect.Value
}

// GoPath lays out, in a temporary directory, the tree Traefik reads local plugins from
// (plugins-local/src/<module>, with vendor/ inside), and returns the directory to give the
// interpreter as its GOPATH. pkgs are the plugins' import paths, under [Module].
func GoPath(t testing.TB, pkgs ...string) string {
	t.Helper()
	root := t.TempDir()
	moduleDir := filepath.Join(root, "src", filepath.FromSlash(Module))
	args := append([]string{"list", "-deps", "-json"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Dir        string
			Standard   bool
			GoFiles    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			continue
		}
		dst := filepath.Join(moduleDir, "vendor", filepath.FromSlash(p.ImportPath))
		if rel, ok := strings.CutPrefix(p.ImportPath, Module+"/"); ok {
			dst = filepath.Join(moduleDir, filepath.FromSlash(rel))
		}
		files := p.GoFiles
		if _, err := os.Stat(filepath.Join(p.Dir, ".traefik.yml")); err == nil {
			files = append(files, ".traefik.yml")
		}
		for _, name := range files {
			copyFile(t, filepath.Join(p.Dir, name), filepath.Join(dst, name))
		}
	}
	return root
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// Compiled returns the plugin whose New and CreateConfig are the compiled functions newFn and
// createConfig, to run the same tests on it.
func Compiled(newFn, createConfig any) *Plugin {
	return &Plugin{newFn: reflect.ValueOf(newFn), createConfig: reflect.ValueOf(createConfig)}
}

// Load interprets the plugin importPath from goPath as Traefik's newInterpreter does, and finds
// its New and CreateConfig. What the plugin prints goes to stdout, where Traefik's debug log
// would have it.
func Load(t testing.TB, goPath, importPath string, stdout io.Writer) *Plugin {
	t.Helper()
	i := interp.New(interp.Options{GoPath: goPath, Env: os.Environ(), Stdout: stdout, Stderr: os.Stderr})
	if err := i.Use(stdlib.Symbols); err != nil {
		t.Fatal(err)
	}
	if _, err := i.Eval(fmt.Sprintf("import %q", importPath)); err != nil {
		t.Fatalf("yaegi: import %s: %v", importPath, err)
	}
	base := path.Base(importPath)
	newFn, err := i.Eval(base + ".New")
	if err != nil {
		t.Fatalf("yaegi: %s.New: %v", base, err)
	}
	createConfig, err := i.Eval(base + ".CreateConfig")
	if err != nil {
		t.Fatalf("yaegi: %s.CreateConfig: %v", base, err)
	}
	return &Plugin{newFn: newFn, createConfig: createConfig}
}

// New decodes config into the plugin's CreateConfig() as Traefik's yaegiMiddlewareBuilder does,
// and calls the plugin's New with it, next and name.
func (p *Plugin) New(ctx context.Context, config map[string]any, next http.Handler, name string) (http.Handler, error) {
	cfg := p.createConfig.Call(nil)[0]
	if len(config) != 0 {
		dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
			DecodeHook:       mapstructure.StringToSliceHookFunc(","),
			WeaklyTypedInput: true,
			Result:           cfg.Interface(),
		})
		if err != nil {
			return nil, err
		}
		if err := dec.Decode(config); err != nil {
			return nil, fmt.Errorf("failed to decode configuration: %w", err)
		}
	}
	out := p.newFn.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(next), cfg, reflect.ValueOf(name)})
	if err, _ := out[1].Interface().(error); err != nil {
		return nil, err
	}
	h, ok := out[0].Interface().(http.Handler)
	if !ok {
		return nil, fmt.Errorf("New returned %T, not an http.Handler", out[0].Interface())
	}
	return h, nil
}
