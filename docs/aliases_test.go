package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Each type and sentinel has one name, in one package: no package of the
// tree aliases another plugreg package's type (type X = api.X) or
// re-exports its value (ErrX = api.ErrX). It scans every package's files
// from the module root, the Go client's included.
func TestNoAliasesOfPlugregNames(t *testing.T) {
	root := "../"
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "compat", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		plugreg := map[string]bool{} // local names of plugreg imports
		for _, im := range f.Imports {
			p := strings.Trim(im.Path.Value, `"`)
			if strings.HasPrefix(p, "github.com/plugreg/plugreg/") {
				name := p[strings.LastIndex(p, "/")+1:]
				if im.Name != nil {
					name = im.Name.Name
				}
				plugreg[name] = true
			}
		}
		of := func(e ast.Expr) (string, bool) {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok {
				return "", false
			}
			x, ok := sel.X.(*ast.Ident)
			return x.Name + "." + sel.Sel.Name, ok && plugreg[x.Name]
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if target, ok := of(s.Type); ok && s.Assign.IsValid() {
						t.Errorf("%s: type %s = %s: use %s", fset.Position(s.Pos()), s.Name.Name, target, target)
					}
				case *ast.ValueSpec:
					for i, v := range s.Values {
						if target, ok := of(v); ok && i < len(s.Names) && s.Names[i].IsExported() && strings.HasSuffix(target, "."+s.Names[i].Name) {
							t.Errorf("%s: %s = %s: use %s", fset.Position(s.Pos()), s.Names[i].Name, target, target)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
