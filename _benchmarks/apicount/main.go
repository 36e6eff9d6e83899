// Command apicount prints the shape of a Go package's exported API: the number of its exported
// identifiers (functions, types, methods of exported types, fields and constants and variables,
// as the project counts them against x/time/rate's 31), its package doc's lines, and every
// other doc comment longer than 30 lines.
//
//	cd _benchmarks && go run ./apicount .. ../edge ../overload
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	for _, dir := range os.Args[1:] {
		n, pkgDoc, long := count(dir)
		fmt.Printf("%s: %d exported identifiers, package doc %d lines\n", dir, n, pkgDoc)
		for _, l := range long {
			fmt.Printf("  doc over 30 lines: %s\n", l)
		}
	}
}

// count returns the exported identifiers of the package in dir, its package doc's lines and the
// doc comments of more than 30 lines.
func count(dir string) (n, pkgDoc int, long []string) {
	fs := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lines := func(g *ast.CommentGroup) int { return strings.Count(g.Text(), "\n") }
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if f.Doc != nil {
			pkgDoc = max(pkgDoc, lines(f.Doc))
		}
		ast.Inspect(f, func(node ast.Node) bool {
			var doc *ast.CommentGroup
			switch d := node.(type) {
			case *ast.FuncDecl:
				doc = d.Doc
				if d.Name.IsExported() && exportedRecv(d) {
					n++
				}
			case *ast.GenDecl:
				doc = d.Doc
				n += exportedSpecs(d)
			case *ast.TypeSpec:
				doc = d.Doc
			case *ast.Field:
				doc = d.Doc
			}
			if doc != nil && lines(doc) > 30 {
				long = append(long, fmt.Sprintf("%s:%d (%d lines)", name, fs.Position(doc.Pos()).Line, lines(doc)))
			}
			return true
		})

	}
	return n, pkgDoc, long
}

// exportedRecv reports whether d is a function or a method of an exported type.
func exportedRecv(d *ast.FuncDecl) bool {
	if d.Recv == nil {
		return true
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}

// exportedSpecs counts the exported names d declares: types with their exported fields and
// interface methods, constants and variables.
func exportedSpecs(d *ast.GenDecl) int {
	n := 0
	for _, s := range d.Specs {
		switch s := s.(type) {
		case *ast.TypeSpec:
			if !s.Name.IsExported() {
				continue
			}
			n++
			var fields *ast.FieldList
			switch t := s.Type.(type) {
			case *ast.StructType:
				fields = t.Fields
			case *ast.InterfaceType:
				fields = t.Methods
			}
			if fields != nil {
				for _, f := range fields.List {
					for _, name := range f.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		case *ast.ValueSpec:
			for _, name := range s.Names {
				if name.IsExported() {
					n++
				}
			}
		}
	}
	return n
}
