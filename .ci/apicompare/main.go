// Command apicompare prints how the exported API of one module changed between two checkouts of
// this repository, with golang.org/x/exp/apidiff: each change on a line of its own, beginning
// "incompatible: " or "compatible: ". The packages are loaded as the go command sees them from
// the module's folder in each checkout (through its go.work, if any); internal packages and
// commands are not API.
//
//	go run . -module github.com/retryafter/retryafter/redisstore OLD/redisstore NEW/redisstore
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/packages"
)

func main() {
	module := flag.String("module", "", "the module's path")
	flag.Parse()
	if *module == "" || flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: apicompare -module PATH OLDDIR NEWDIR")
		os.Exit(2)
	}
	old, err := load(*module, flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicompare: the old API:", err)
		os.Exit(1)
	}
	cur, err := load(*module, flag.Arg(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicompare: the new API:", err)
		os.Exit(1)
	}
	var lines []string
	for _, c := range apidiff.ModuleChanges(old, cur).Changes {
		kind := "incompatible"
		if c.Compatible {
			kind = "compatible"
		}
		lines = append(lines, kind+": "+c.Message)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// load type-checks the packages of module in dir that are its API.
func load(module, dir string) (*apidiff.Module, error) {
	// The workspace of the checkout, whatever GOWORK this command was run with (go run needs
	// GOWORK=off, since this module is in no go.work).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") {
			env = append(env, kv)
		}
	}
	cfg := &packages.Config{
		Dir:  dir,
		Env:  env,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedImports | packages.NeedDeps | packages.NeedModule,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	m := &apidiff.Module{Path: module}
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Path != module || p.Name == "main" || internal(p.PkgPath) {
			continue
		}
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("%s: %v", p.PkgPath, p.Errors[0])
		}
		m.Packages = append(m.Packages, p.Types)
	}
	if len(m.Packages) == 0 {
		return nil, fmt.Errorf("no package of %s in %s", module, dir)
	}
	return m, nil
}

func internal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}
