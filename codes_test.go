package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/errors.md from the code table")

// renderErrorsDoc renders docs/errors.md from the code table.
func renderErrorsDoc() []byte {
	var b bytes.Buffer
	b.WriteString("# Error codes\n\n")
	b.WriteString("Every error idem produces carries one of these stable codes (`code` in the problem object,\n")
	b.WriteString("the MCP tool result and the CLI's JSON output). `retryable` says whether sending the same\n")
	b.WriteString("request again, unchanged, may succeed. On a keyed call, a 5xx produced after the handler\n")
	b.WriteString("started is answered with `retryable: false` and `details.reconcile`, because the attempt is\n")
	b.WriteString("now indeterminate (SPEC §6.4); its `detail` says that the call may have executed and names\n")
	b.WriteString("the reconcile operation to run before deciding.\n\n")
	b.WriteString("An application adds the business codes its operations declare with `idem.RegisterCodes`\n")
	b.WriteString("(docs/embedding.md, \"Business errors\"): they are answered like the codes below, with their\n")
	b.WriteString("own status, retryability, title and action, and documented by the application. The\n")
	b.WriteString("reference application's (`BUSINESS_EXISTS`, `ALREADY_REFUNDED`, `LIMIT_CONFLICT`) are in\n")
	b.WriteString("docs/demo.md, \"Error codes\".\n\n")
	b.WriteString("This file is generated from `codes.go` by `go test -run TestErrorsDoc -update .`;\n")
	b.WriteString("a test fails when the two disagree.\n\n")
	b.WriteString("| code | status | retryable | title | what to do |\n|---|---|---|---|---|\n")
	for _, c := range Codes() {
		info := c.Info()
		status := fmt.Sprint(info.Status)
		if info.Status == 0 {
			status = "0 (no HTTP answer)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %v | %s | %s |\n", c, status, info.Retryable, info.Title, strings.ReplaceAll(info.Action, "|", `\|`))
	}
	return b.Bytes()
}

func TestErrorsDoc(t *testing.T) {
	want := renderErrorsDoc()
	if *update {
		if err := os.WriteFile("docs/errors.md", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/errors.md is out of step with codes.go; run: go test -run TestErrorsDoc -update .")
	}
}

func TestCodeTable(t *testing.T) {
	want := map[Code]struct {
		status    int
		retryable bool
	}{
		CodeIdempotencyKeyInvalid:          {400, false},
		CodeIdempotencyKeyNotSupported:     {400, false},
		CodeDryRunNotSupported:             {400, false},
		CodeIdempotencyKeyRequired:         {400, false},
		CodeIdempotencyKeyReused:           {422, false},
		CodeIdempotencyKeyInFlight:         {409, true},
		CodeIdempotencyResultIndeterminate: {409, false},
		CodeIdempotencyResultExpired:       {410, false},
		CodeStoreUnavailable:               {503, true},
		CodeTimeout:                        {504, true},
		CodeCancelled:                      {499, false},
		CodeExecutionFailed:                {500, false},
		CodeOutputInvalid:                  {500, false},
		CodePolicyDenied:                   {403, false},
		CodePolicyFailed:                   {403, false},
		CodeApprovalRequired:               {403, false},
		CodeApprovalRejected:               {403, false},
		CodeSelfApprovalForbidden:          {403, false},
		CodeForbidden:                      {403, false},
		CodeApprovalNotFound:               {404, false},
		CodeApprovalAlreadyDecided:         {409, false},
		CodeApprovalExpired:                {409, false},
		CodeOperationNotFound:              {404, false},
		CodeNotFound:                       {404, false},
		CodeMethodNotAllowed:               {405, false},
		CodeInvalidInput:                   {400, false},
		CodeRequestTooLarge:                {413, false},
		CodeRequestTimeout:                 {408, true},
		CodeRateLimited:                    {429, true},
		CodeNetworkError:                   {0, true},
		CodeUpstreamUnavailable:            {503, true},
	}
	for code, w := range want {
		t.Run(string(code), func(t *testing.T) {
			info := code.Info()
			if !code.Known() || info.Status != w.status || info.Retryable != w.retryable {
				t.Fatalf("%s = %+v, want status %d retryable %v", code, info, w.status, w.retryable)
			}
			if info.Title == "" || info.Action == "" {
				t.Fatalf("%s has no title or action", code)
			}
		})
	}
}

// codeTestConflict is an application's code, registered as an application
// registers its own.
const codeTestConflict Code = "TEST_CONFLICT"

func init() {
	RegisterCodes(map[Code]CodeInfo{codeTestConflict: {Status: 409, Title: "Test conflict", Action: "Change the test."}})
}

func TestRegisterCodes(t *testing.T) {
	info := codeTestConflict.Info()
	if !codeTestConflict.Known() || info != (CodeInfo{409, false, "Test conflict", "Change the test."}) {
		t.Fatalf("registered code: Known %v, Info %+v", codeTestConflict.Known(), info)
	}
	if slices.Contains(Codes(), codeTestConflict) {
		t.Error("Codes lists a registered code")
	}
	e := Errorf(codeTestConflict, "changed since").WithDetail("current", 3)
	body, err := json.Marshal(NewProblem(e, nil))
	if want := `{"type":"urn:idem:error:TEST_CONFLICT","title":"Test conflict","status":409,"detail":"changed since","code":"TEST_CONFLICT","retryable":false,"details":{"current":3}}`; err != nil || string(body) != want {
		t.Errorf("problem = %s (%v), want %s", body, err, want)
	}
	// The same information again is no registration at all.
	RegisterCodes(map[Code]CodeInfo{codeTestConflict: info})

	// Unregistered, a code keeps the status its Error carries and reads
	// as INTERNAL elsewhere.
	const unregistered Code = "TEST_UNREGISTERED"
	if unregistered.Known() || unregistered.Info() != CodeInternal.Info() {
		t.Errorf("unregistered code: Known %v, Info %+v", unregistered.Known(), unregistered.Info())
	}
	if p := NewProblem(&Error{Code: unregistered, Status: 409, Message: "m"}, nil); p.Title != "Conflict" || p.Status != 409 {
		t.Errorf("unregistered problem = %+v", p)
	}

	ok := CodeInfo{Status: 409, Title: "T", Action: "A"}
	for name, codes := range map[string]map[Code]CodeInfo{
		"idem's own":         {CodeNotFound: ok},
		"other information":  {codeTestConflict: {Status: 422, Title: "Test conflict", Action: "Change the test."}},
		"lower case":         {"test_lower": ok},
		"empty":              {"": ok},
		"leading digit":      {"1TEST": ok},
		"a 2xx":              {"TEST_OK": {Status: 200, Title: "T", Action: "A"}},
		"no status":          {"TEST_ZERO": {Title: "T", Action: "A"}},
		"no title":           {"TEST_UNTITLED": {Status: 409, Action: "A"}},
		"no action":          {"TEST_NO_ACTION": {Status: 409, Title: "T"}},
		"one bad of several": {"TEST_GOOD": ok, "TEST_BAD": {Status: 600, Title: "T", Action: "A"}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("RegisterCodes(%v) did not panic", codes)
				}
				for c := range codes {
					if _, own := codeTable[c]; !own && c != codeTestConflict && c.Known() {
						t.Fatalf("%s registered by a registration that panicked", c)
					}
				}
				if codeTestConflict.Info() != info || CodeNotFound.Info().Status != 404 {
					t.Fatal("a registration that panicked changed the table")
				}
			}()
			RegisterCodes(codes)
		})
	}
}

func TestErrorCode(t *testing.T) {
	e := Errorf(CodeIdempotencyKeyReused, "key %q", "k")
	wrapped := fmt.Errorf("reserve: %w", e)
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"domain", e, CodeIdempotencyKeyReused},
		{"wrapped", wrapped, CodeIdempotencyKeyReused},
		{"unknown", errors.New("boom"), CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorCode(tt.err); got != tt.want {
				t.Fatalf("ErrorCode = %q, want %q", got, tt.want)
			}
		})
	}
	if e.Status != 422 || e.Retryable {
		t.Errorf("Errorf did not take status and retryability from the table: %+v", e)
	}
	if !errors.Is(Unavailable("reserve", errors.New("refused")), ErrStoreUnavailable) {
		t.Error("Unavailable does not match ErrStoreUnavailable")
	}
	if errors.Is(e, ErrStoreUnavailable) {
		t.Error("a 422 matches ErrStoreUnavailable")
	}
	if got := AsError(errors.New("boom")); got.Code != CodeInternal || got.Status != 500 || strings.Contains(got.Message, "boom") {
		t.Errorf("AsError leaks or misclassifies: %+v", got)
	}
	d := e.WithDetail("reconcile", "order.show")
	if e.Details != nil || d.Details["reconcile"] != "order.show" {
		t.Error("WithDetail changed the original or lost the detail")
	}
}
