package policyfile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/policyfile"
)

// benchRules are a dozen rules that all match business.create (names,
// globs, side effects), eleven with a condition over principal, operation
// and args: the worst case, every rule evaluated on every call.
const benchRules = `
policies:
  - {name: r01, operations: ["business.create"], when: 'args.slug.startsWith("forbidden-")', outcome: deny, reason: "no"}
  - {name: r02, operations: ["business.*"], when: 'args.name.size() > 200', outcome: deny, reason: "too long"}
  - {name: r03, sideEffects: [write], when: 'principal.kind == "browser"', outcome: require_approval, reason: "people ask"}
  - {name: r04, operations: ["*"], when: '"ops" in principal.roles', outcome: allow}
  - {name: r05, operations: ["business.create"], when: 'args.slug.matches("^[a-z0-9-]+$") == false', outcome: deny, reason: "slug"}
  - {name: r06, operations: ["business.create"], when: 'principal.org != "acme"', outcome: deny, reason: "org"}
  - {name: r07, operations: ["business.create"], when: 'operation.sideEffect == "destructive"', outcome: deny, reason: "x"}
  - {name: r08, operations: ["business.create"], when: 'args.name.contains("<script")', outcome: deny, reason: "markup"}
  - {name: r09, operations: ["business.create"], when: 'has(args.plan) && args.plan == "enterprise"', outcome: require_approval, reason: "big plan"}
  - {name: r10, operations: ["business.create"], when: 'principal.id.endsWith("-test") && args.slug != "x"', outcome: deny, reason: "tests"}
  - {name: r11, operations: ["business.create"], when: 'operation.upstream == "" && args.name != ""', outcome: allow}
  - {name: r12, operations: ["business.create"], outcome: allow}
`

// BenchmarkPolicies is stage 6 with a dozen configured rules, as the
// pipeline runs it (idem.EvaluatePolicies over the set's policy): the
// arguments decoded once, every rule evaluated.
func BenchmarkPolicies(b *testing.B) {
	op := idem.Descriptor{Metadata: idem.Metadata{Name: "business.create", SideEffect: idem.SideEffectWrite},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"slug":{"type":"string"},"name":{"type":"string"},"plan":{"type":"string"}}}`)}
	f, err := policyfile.Parse([]byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	set, err := policyfile.Compile(f, []idem.Descriptor{op}, policyfile.Options{})
	if err != nil {
		b.Fatal(err)
	}
	policies := []idem.Policy{set.Policy()}
	in := idem.PolicyInput{Operation: op.Metadata, Principal: idem.Principal{Org: "acme", ID: "agent-1", Kind: idem.KindAgent},
		RawInput: json.RawMessage(`{"slug":"b-bench-1","name":"Bench"}`)}
	ctx := context.Background()
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		d, rec, err := idem.EvaluatePolicies(ctx, policies, in)
		if err != nil || d.Effect != idem.Allow || len(rec) != 2 {
			b.Fatalf("%+v %v %v", d, rec, err)
		}
	}
	// The process's CPU per call (every goroutine, the collector's too),
	// as BenchmarkServerCall reports it.
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTake is one call's pass through the limits (pipeline.Rules):
// a catalog of 200 operations and eight limits, by name, glob and side
// effect, three of which apply to the call's operation.
func BenchmarkTake(b *testing.B) {
	var ops []idem.Descriptor
	for i := range 200 {
		se := idem.SideEffectRead
		if i%2 == 0 {
			se = idem.SideEffectWrite
		}
		ops = append(ops, idem.Descriptor{Metadata: idem.Metadata{Name: fmt.Sprintf("svc%d.op%d", i%10, i), SideEffect: se}})
	}
	f, err := policyfile.Parse([]byte(`
limits:
  - {name: l1, per: principal, operations: ["svc1.*"], rate: 1000000/s}
  - {name: l2, per: principal, operations: ["svc2.*", "svc3.*"], rate: 1000000/s}
  - {name: l3, per: org, operations: ["*.op1[0-9]"], rate: 1000000/s}
  - {name: l4, per: org, sideEffects: [write], rate: 1000000/s}
  - {name: l5, per: principal, operations: ["svc4.op4", "svc5.op5"], rate: 1000000/s}
  - {name: l6, per: operation, operations: ["svc[0-4].*"], sideEffects: [read], rate: 1000000/s}
  - {name: l7, per: principal, operations: ["svc9.*"], rate: 1000000/s}
  - {name: l8, per: org, operations: ["*.op199"], rate: 1000000/s}
`))
	if err != nil {
		b.Fatal(err)
	}
	set, err := policyfile.Compile(f, ops, policyfile.Options{})
	if err != nil {
		b.Fatal(err)
	}
	op := ops[11].Metadata // svc1.op11, a read: l1, l3 and l6
	p := idem.Principal{Org: "acme", ID: "agent-1"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if l := set.Take(p, op, now); l != nil {
			b.Fatalf("refused by %s", l.Limit)
		}
	}
}
