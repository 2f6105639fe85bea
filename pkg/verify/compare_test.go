package verify

import (
	"crypto/rand"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tag that differs from the computed one in any single byte — the first,
// one in the middle, the last — is a mismatch: the whole tag is compared,
// not a prefix of it.
func TestEveryByteOfTheTagCounts(t *testing.T) {
	pol := Policy{Params: Params{Memory: 64, Iterations: 1, Parallelism: 1}, SaltLen: 16, KeyLen: 32}
	v, err := New(pol, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	pw := []byte("every byte counts")
	h, err := v.HashPassword(pw, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := v.Verify(h, pw); err != nil || !ok {
		t.Fatalf("Verify of the untouched hash = %v, %v", ok, err)
	}
	for _, i := range []int{0, 7, 8, len(h.Key) / 2, len(h.Key) - 1} {
		tampered := *h
		tampered.Key = append([]byte(nil), h.Key...)
		tampered.Key[i] ^= 0x80
		if ok, _, err := v.Verify(&tampered, pw); err != nil || ok {
			t.Errorf("a tag differing in byte %d of %d: match %v, err %v; want a mismatch", i, len(h.Key), ok, err)
		}
	}
}

// The package compares tags only with crypto/subtle's constant-time
// compare: a comparison whose time depends on where the first differing
// byte is would leak the tag to a caller who can time many guesses. Timing
// cannot be asserted in a test on a shared machine; the source can: no
// non-test file of the package calls bytes.Equal, bytes.Compare or
// reflect.DeepEqual, and both verification paths (Argon2 and the legacy
// formats) call subtle.ConstantTimeCompare.
func TestTagsComparedInConstantTime(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	constantTime := map[string]int{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch fn := pkg.Name + "." + sel.Sel.Name; fn {
			case "bytes.Equal", "bytes.Compare", "reflect.DeepEqual", "slices.Equal":
				t.Errorf("%s: %s: secrets are compared with subtle.ConstantTimeCompare only", fset.Position(call.Pos()), fn)
			case "subtle.ConstantTimeCompare":
				constantTime[name]++
			}
			return true
		})
	}
	for _, name := range []string{"verify.go", "legacy.go"} {
		if constantTime[name] == 0 {
			t.Errorf("%s compares no tag with subtle.ConstantTimeCompare", name)
		}
	}
}
