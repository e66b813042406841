package demo

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/idem-run/idem"
)

var update = flag.Bool("update", false, "rewrite the error codes of docs/demo.md from the code table")

const (
	demoDoc = "../docs/demo.md"
	// The generated table of docs/demo.md lies between these lines.
	codesBegin = "<!-- The table is generated from demo/codes.go: go test ./demo/ -run TestCodesDoc -update -->\n"
	codesEnd   = "<!-- end of the generated table -->\n"
)

// declaredBy returns, for every code the demo's operations declare that is
// not one of idem's own, the operations declaring it, sorted.
func declaredBy(t *testing.T) map[idem.Code][]string {
	t.Helper()
	own := map[idem.Code]bool{}
	for _, c := range idem.Codes() {
		own[c] = true
	}
	out := map[idem.Code][]string{}
	for _, op := range (&App{}).Operations() {
		m := op.Metadata()
		for _, e := range m.Errors {
			if own[e.Code] {
				continue
			}
			info, ok := codeTable[e.Code]
			if !ok {
				t.Fatalf("%s declares %s, which is neither idem's nor in demo/codes.go", m.Name, e.Code)
			}
			if e.Status != info.Status {
				t.Fatalf("%s declares %s with status %d, demo/codes.go gives %d", m.Name, e.Code, e.Status, info.Status)
			}
			out[e.Code] = append(out[e.Code], m.Name)
		}
	}
	for c := range out {
		sort.Strings(out[c])
	}
	return out
}

// renderCodes renders the generated table of docs/demo.md.
func renderCodes(t *testing.T) string {
	by := declaredBy(t)
	codes := make([]idem.Code, 0, len(codeTable))
	for c := range codeTable {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var b strings.Builder
	b.WriteString("| code | status | retryable | title | what to do | declared by |\n|---|---|---|---|---|---|\n")
	for _, c := range codes {
		info := codeTable[c]
		if len(by[c]) == 0 {
			t.Fatalf("%s is declared by no operation", c)
		}
		fmt.Fprintf(&b, "| `%s` | %d | %v | %s | %s | `%s` |\n", c, info.Status, info.Retryable, info.Title,
			strings.ReplaceAll(info.Action, "|", `\|`), strings.Join(by[c], "`, `"))
	}
	return b.String()
}

// TestCodesDoc keeps the error codes of docs/demo.md in step with
// demo/codes.go and with the operations that declare them.
func TestCodesDoc(t *testing.T) {
	doc, err := os.ReadFile(demoDoc)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(codesBegin)), bytes.Index(doc, []byte(codesEnd))
	if i < 0 || j < i {
		t.Fatalf("%s has no generated table between %q and %q", demoDoc, codesBegin, codesEnd)
	}
	i += len(codesBegin)
	want := renderCodes(t)
	if *update {
		doc = slices.Concat(doc[:i], []byte(want), doc[j:])
		if err := os.WriteFile(demoDoc, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := string(doc[i:j]); got != want {
		t.Fatalf("the error codes of docs/demo.md are out of step with demo/codes.go; run: go test ./demo/ -run TestCodesDoc -update\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// TestCodesOnTheWire: the demo's codes are registered with idem, so that
// their problems are what they were when idem's own table held them.
func TestCodesOnTheWire(t *testing.T) {
	want := map[idem.Code]string{
		CodeBusinessExists:  `{"type":"urn:idem:error:BUSINESS_EXISTS","title":"Business exists","status":409,"detail":"m","code":"BUSINESS_EXISTS","retryable":false}`,
		CodeAlreadyRefunded: `{"type":"urn:idem:error:ALREADY_REFUNDED","title":"Already refunded","status":409,"detail":"m","code":"ALREADY_REFUNDED","retryable":false}`,
		CodeLimitConflict:   `{"type":"urn:idem:error:LIMIT_CONFLICT","title":"Limit conflict","status":409,"detail":"m","code":"LIMIT_CONFLICT","retryable":false}`,
	}
	if len(want) != len(codeTable) {
		t.Fatalf("%d codes in demo/codes.go, %d here", len(codeTable), len(want))
	}
	for c, w := range want {
		if !c.Known() || c.Info() != codeTable[c] || idem.Declare(c, "m").Status != codeTable[c].Status {
			t.Errorf("%s is not registered: Known %v, Info %+v", c, c.Known(), c.Info())
		}
		body, err := json.Marshal(idem.NewProblem(idem.Errorf(c, "m"), nil))
		if err != nil || string(body) != w {
			t.Errorf("%s: problem = %s (%v), want %s", c, body, err, w)
		}
	}
}
