//go:build ignore

// Command apisurface prints the exported identifiers of every non-test,
// non-internal package of every module in the workspace, one package a line:
// the number of top-level exported identifiers (consts, vars, funcs, types:
// what `go doc -short` lists), the number including the exported methods,
// struct fields and interface methods of exported types, and the import path.
// With -v it lists the identifiers too. Run it from the repository root:
//
//	go run scripts/apisurface/main.go [-v] [dir ...]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list the identifiers of each package")
	flag.Parse()
	roots := flag.Args()
	if len(roots) == 0 {
		roots = []string{"."}
	}
	total, totalTop := 0, 0
	for _, root := range roots {
		pkgs, err := scan(root)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apisurface:", err)
			os.Exit(1)
		}
		paths := make([]string, 0, len(pkgs))
		for p := range pkgs {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			ids := pkgs[p]
			top := 0
			for _, id := range ids {
				if !strings.Contains(id, ".") {
					top++
				}
			}
			total += len(ids)
			totalTop += top
			fmt.Printf("%4d %4d %s\n", top, len(ids), p)
			if *verbose {
				for _, id := range ids {
					fmt.Printf("       %s\n", id)
				}
			}
		}
	}
	fmt.Printf("%4d %4d total\n", totalTop, total)
}

// scan walks root and returns, per import path, the sorted exported
// identifiers of the package in that directory.
func scan(root string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "internal" || name == "vendor") {
			return filepath.SkipDir
		}
		ids, pkgName, err := exported(path)
		if err != nil {
			return err
		}
		if pkgName == "" || pkgName == "main" {
			return nil
		}
		imp, err := importPath(path)
		if err != nil {
			return err
		}
		out[imp] = ids
		return nil
	})
	return out, err
}

// exported parses the non-test Go files of dir (honouring no build tags
// except ignore) and returns its exported identifiers and package name.
func exported(dir string) ([]string, string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", err
	}
	var ids []string
	pkgName := ""
	types := map[string]bool{}
	var decls []ast.Decl
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, "", err
		}
		if ignored(f) {
			continue
		}
		pkgName = f.Name.Name
		decls = append(decls, f.Decls...)
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						types[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, d := range decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				ids = append(ids, d.Name.Name)
				continue
			}
			if recv := recvName(d.Recv.List[0].Type); types[recv] {
				ids = append(ids, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							ids = append(ids, n.Name)
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					ids = append(ids, s.Name.Name)
					switch t := s.Type.(type) {
					case *ast.StructType:
						for _, f := range t.Fields.List {
							for _, n := range f.Names {
								if n.IsExported() {
									ids = append(ids, s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.InterfaceType:
						for _, m := range t.Methods.List {
							for _, n := range m.Names {
								if n.IsExported() {
									ids = append(ids, s.Name.Name+"."+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(ids)
	return ids, pkgName, nil
}

// ignored reports whether f carries a //go:build ignore constraint.
func ignored(f *ast.File) bool {
	for _, c := range f.Comments {
		if c.Pos() > f.Package {
			break
		}
		for _, l := range c.List {
			if strings.HasPrefix(l.Text, "//go:build") && strings.Contains(l.Text, "ignore") {
				return true
			}
		}
	}
	return false
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// importPath returns dir's import path from the nearest enclosing go.mod.
func importPath(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rel := ""
	for d := abs; ; d = filepath.Dir(d) {
		if mod, ok := modulePath(filepath.Join(d, "go.mod")); ok {
			return strings.TrimSuffix(mod+"/"+filepath.ToSlash(rel), "/"), nil
		}
		if d == filepath.Dir(d) {
			return filepath.ToSlash(dir), nil
		}
		rel = filepath.Join(filepath.Base(d), rel)
	}
}

func modulePath(gomod string) (string, bool) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), true
		}
	}
	return "", false
}
