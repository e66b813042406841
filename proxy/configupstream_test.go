package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem/proxy"
)

// Issue 34 (gateway.md "Not yet" 2 and 8): an OpenAPI upstream of a
// gateway config takes its timeouts.call as its operations' timeout (an
// overlay entry's timeoutMs wins), and its warnings name its served
// operations and its contracts: file, where the one-upstream flags'
// name --contracts.
func TestBuildForAConfigUpstream(t *testing.T) {
	overlay := proxy.Overlay{"listThings": {TimeoutMs: 500}}
	built, err := proxy.Build(loadDoc(t, keyedDoc), overlay, proxy.Options{Forward: noForward,
		Prefix: "billing", ConfigUpstream: "billing", Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"billing.listThings": 500 * time.Millisecond, "billing.createThing": 2 * time.Minute, "billing.createNote": 2 * time.Minute}
	for _, op := range built.Operations {
		if m := op.Metadata(); m.Timeout != want[m.Name] {
			t.Errorf("%s: timeout %s, want %s", m.Name, m.Timeout, want[m.Name])
		}
	}
	if w := strings.Join(built.Warnings, "\n"); !strings.Contains(w, `: billing.createNote; declare one with x-idem-agent-retry or in the contracts: file of upstream "billing"`) {
		t.Errorf("warnings: %s", w)
	}
	flags, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: noForward})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(flags.Warnings, "\n"); !strings.Contains(w, ": createNote; declare one with x-idem-agent-retry or in --contracts") {
		t.Errorf("warnings: %s", w)
	}
}
