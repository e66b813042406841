package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/policyfile"
	"github.com/idem-run/idem/server"
)

// compilePolicies loads the policy file at path and compiles it against
// ops (SPEC §8.1).
func compilePolicies(path string, ops []idem.Descriptor, upstream func(string) string) (*policyfile.Set, error) {
	f, err := policyfile.Load(path)
	if err != nil {
		return nil, err
	}
	return compileRules(f, path, ops, upstream)
}

// compileRules compiles the rules and limits of f, read from source,
// against ops: the one compilation of --policies FILE and of the gateway
// config's policies: and limits: (SPEC §8.1, §17.1).
func compileRules(f policyfile.File, source string, ops []idem.Descriptor, upstream func(string) string) (*policyfile.Set, error) {
	set, err := policyfile.Compile(f, ops, policyfile.Options{Upstream: upstream})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return set, nil
}

// policies put a server's configured rules in place: those of --policies
// FILE (path), loaded at start, again on SIGHUP and after the operations
// reload, a file that no longer loads or compiles keeping the running
// rules; or those idem gateway --config compiled with its upstreams (put).
type policies struct {
	path     string
	upstream func(string) string
	srv      *server.Server
	logger   *slog.Logger
	warned   []string
	current  *policyfile.Set
}

// load compiles the file against the operations the server runs now and
// puts its rules in place.
func (p *policies) load() error {
	set, err := compilePolicies(p.path, p.srv.Runner().Descriptors(), p.upstream)
	if err != nil {
		return err
	}
	p.put(set, p.path)
	return nil
}

// put makes set the server's rules (nil: none), logging its warnings when
// they differ from the last set's; a limit left as it was keeps its
// buckets (a reload does not refill them).
func (p *policies) put(set *policyfile.Set, source string) {
	var w []string
	if set != nil {
		w = set.Warnings()
		set.Keep(p.current)
	}
	p.current = set
	if !slices.Equal(w, p.warned) {
		for _, line := range w {
			p.logger.Warn("policies", "file", source, "warning", line)
		}
		p.warned = w // a reload logs them again only when they change
	}
	if set == nil {
		p.srv.Runner().SetRules(nil) // not a typed nil in the interface
		return
	}
	p.srv.Runner().SetRules(set)
}

// reload is load for a running server: a failure is logged and the
// running rules stay.
func (p *policies) reload(why string) {
	if err := p.load(); err != nil {
		p.logger.Error("policies not reloaded: the running rules stay", "trigger", why, "file", p.path, "error", err)
		return
	}
	level := slog.LevelInfo
	if why == "interval" {
		level = slog.LevelDebug // every --reload-interval: not news
	}
	p.logger.Log(context.Background(), level, "policies reloaded", "trigger", why, "file", p.path)
}

// reloadOnHangup reloads the policies on SIGHUP until ctx ends (a server
// whose operations do not reload: reloadLoop does it otherwise).
func (p *policies) reloadOnHangup(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			p.reload("SIGHUP")
		}
	}
}

func (m Main) policyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check policy files and try their rules (SPEC §8.1, docs/policies.md)",
		Args:  cobra.NoArgs,
	}
	var catalog string
	check := &cobra.Command{
		Use:   "check FILE --catalog URL|FILE",
		Short: "Compile a policy file against a catalog, as idem serve --policies does at start",
		Long: "Load FILE's policies and limits and compile every rule against the operations of the catalog\n" +
			"(GET /v1/operations: a file, - for stdin, or a URL). Exit status: 0 the file is good, 1 it is\n" +
			"refused (each error names its rule), 2 usage (bad arguments, a catalog that cannot be read).",
		Example: "  idem policy check policies.yaml --catalog http://127.0.0.1:8080",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := m.catalogDescriptors(cmd.Context(), catalog)
			if err != nil {
				return err
			}
			set, err := compilePolicies(args[0], ops, nil)
			if err != nil {
				return err
			}
			for _, w := range set.Warnings() {
				fmt.Fprintf(m.Stderr, "warning: %s\n", w)
			}
			fmt.Fprintf(m.Stdout, "%s: %d rules and %d limits compile against %d operations\n", args[0], set.Rules(), set.Limits(), len(ops))
			return nil
		},
	}
	check.Flags().StringVar(&catalog, "catalog", "", "the catalog to check against: a file, - for stdin, or a server's URL")

	var e evalOptions
	eval := &cobra.Command{
		Use:   "eval FILE --catalog URL|FILE --operation NAME [--principal ORG/ID] [--roles R,…] [--args JSON]",
		Short: "Print which rules of a policy file match a call, and the outcome",
		Long: "Evaluate FILE's rules on one call, without calling anything: the rules that match (rule=outcome,\n" +
			"in file order) and the outcome with its rule and reason. Exit status, as the CLI's table\n" +
			"(docs/cli.md): 0 allow, 5 require_approval, 1 deny or a rule that fails (POLICY_FAILED), 2 usage\n" +
			"(bad arguments, a file or catalog that cannot be read or compiled).",
		Example: "  idem policy eval policies.yaml --catalog catalog.json --operation payments.refund \\\n" +
			"      --principal acme/agent-7 --kind agent --args '{\"amount\": 5000}'",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e.file, e.catalog = args[0], catalog
			return m.policyEval(cmd.Context(), e)
		},
	}
	f := eval.Flags()
	f.StringVar(&catalog, "catalog", "", "the catalog of the operation: a file, - for stdin, or a server's URL")
	f.StringVar(&e.operation, "operation", "", "the operation (or tool) called")
	f.StringVar(&e.principal, "principal", "acme/agent", "the caller, ORG/ID")
	f.StringVar(&e.kind, "kind", string(idem.KindAgent), "the caller's kind (agent, cli_session, service_account, browser)")
	f.StringSliceVar(&e.roles, "roles", nil, "the caller's roles, comma-separated")
	f.StringVar(&e.args, "args", "{}", "the call's arguments as a JSON object")
	f.StringVar(&e.upstream, "upstream", "", "operation.upstream as the server would give it")
	cmd.AddCommand(check, eval)
	return cmd
}

type evalOptions struct {
	file, catalog, operation, principal, kind, args, upstream string
	roles                                                     []string
}

func (m Main) policyEval(ctx context.Context, e evalOptions) error {
	org, id, ok := strings.Cut(e.principal, "/")
	if !ok || org == "" || id == "" {
		return usagef("--principal %q: want ORG/ID", e.principal)
	}
	if e.operation == "" {
		return usagef("give the operation with --operation NAME")
	}
	if !json.Valid([]byte(e.args)) {
		return usagef("--args is not JSON: give the arguments as a JSON object, e.g. '{\"amount\": 5000}'")
	}
	ops, err := m.catalogDescriptors(ctx, e.catalog)
	if err != nil {
		return err
	}
	var op *idem.Descriptor
	for i := range ops {
		if ops[i].Name == e.operation {
			op = &ops[i]
		}
	}
	if op == nil {
		return usagef("--operation %q: the catalog has no such operation", e.operation)
	}
	set, err := compilePolicies(e.file, ops, func(string) string { return e.upstream })
	if err != nil {
		return usageError{err}
	}
	p := idem.Principal{Org: org, ID: id, Kind: idem.PrincipalKind(e.kind), Roles: e.roles}
	d, record, err := idem.EvaluatePolicies(ctx, []idem.Policy{set.Policy()}, idem.PolicyInput{Operation: op.Metadata, Principal: p, RawInput: json.RawMessage(e.args)})
	for _, r := range record {
		fmt.Fprintln(m.Stdout, r)
	}
	if err != nil {
		fmt.Fprintf(m.Stdout, "outcome: %s: %s\n", idem.CodePolicyFailed, idem.AsError(err).Message)
		return exitStatus(exitError)
	}
	if len(record) == 0 {
		fmt.Fprintln(m.Stdout, "(no rule matches)")
	}
	if d.Effect == idem.Allow {
		fmt.Fprintln(m.Stdout, "outcome: allow")
		return nil
	}
	line := fmt.Sprintf("outcome: %s by rule %s: %s", d.Effect, d.Rule, d.Reason)
	if d.Effect == idem.RequireApproval {
		role := d.ApproverRole
		if role == "" {
			role = idem.RoleApprover
		}
		fmt.Fprintf(m.Stdout, "%s (decided by role %s)\n", line, role)
		return exitStatus(exitApproval)
	}
	fmt.Fprintln(m.Stdout, line)
	return exitStatus(exitError)
}

// catalogDescriptors reads a catalog (GET /v1/operations, bare or in its
// {"data": …} envelope) as the descriptors a policy file compiles
// against.
func (m Main) catalogDescriptors(ctx context.Context, src string) ([]idem.Descriptor, error) {
	if src == "" {
		return nil, usagef("give the catalog with --catalog URL|FILE (a server's URL, or a file of GET /v1/operations)")
	}
	data, err := m.readCatalogBytes(ctx, src)
	if err != nil {
		return nil, usagef("--catalog %s: %v", src, err)
	}
	var env struct {
		Data *idem.Catalog `json:"data"`
		idem.Catalog
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, usagef("--catalog %s: not a catalog: %v", src, err)
	}
	cat := env.Catalog
	if env.Data != nil {
		cat = *env.Data
	}
	if len(cat.Operations) == 0 {
		return nil, usagef("--catalog %s: no operations", src)
	}
	out := make([]idem.Descriptor, len(cat.Operations))
	for i, c := range cat.Operations {
		out[i] = idem.Descriptor{Metadata: idem.Metadata{Name: c.Name, Method: c.Method, Path: c.Path, SideEffect: c.SideEffect, Retry: c.Retry, Approval: c.Approval},
			InputSchema: c.InputSchema, OutputSchema: c.OutputSchema}
	}
	return out, nil
}
