package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/canonical"
	"github.com/idem-run/idem/client"
)

// callOptions are the flags of idem call.
type callOptions struct {
	remote       remoteOptions
	params       []string
	data         string
	key          string
	task         string
	dryRun       dryRunFlag
	wait         time.Duration
	retries      int
	retryTimeout time.Duration
}

func (m Main) callCommand() *cobra.Command {
	var o callOptions
	cmd := &cobra.Command{
		Use:   "call OPERATION",
		Short: "Call an operation by name, with contract-aware retries",
		Long: `Call an operation of the catalog by name. Arguments are flat, as in the catalog's inputSchema:
path parameters, query parameters and body fields alike, from --param NAME=VALUE and --data.

A --param value is sent as a string when the inputSchema types the argument as a string;
otherwise a JSON number or true/false is sent as that JSON value, a JSON string literal
("...") as that string, and anything else as a string. --data is a JSON object (or @FILE,
or @- for stdin) merged with the parameters; a name given twice is refused.

Keys: --idempotency-key KEY sends a key you recorded yourself; --task NAME keeps durable agent
task state: the first run mints a key and journals {task, key, operation, fingerprint}
(fsynced) before sending anything, later runs of the task re-send the same key, and a run
of the task with another intent is refused without sending anything (exit 2). The CLI
refuses a key with --dry-run, also without sending anything (exit 2).

Retries follow the operation's retry contract: same_key_replay calls with a key are retried
with the same key on network errors, timeouts, 409 IDEMPOTENCY_KEY_IN_FLIGHT and 503;
fresh_read calls on network errors and 5xx; every other kind never automatically.

Exit codes: 0 success; 1 a 4xx answer; 2 usage error or locally refused intent; 3 transient
(network, 503, retries exhausted); 4 indeterminate or expired, or a 5xx (reconcile first);
5 approval required.`,
		Example: `  idem call business.create --data '{"slug":"quillby","name":"Quillby"}' --task create-quillby
  idem call order.refund --param id=ord_1 --param amount=100 --idempotency-key "$KEY"
  idem call backend.bind --param slug=quillby --param name=api --param environment=preview \
      --param originUrl=https://preview-api.example.com --dry-run`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: m.completeOperation(&o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return m.call(cmd.Context(), args[0], o)
		},
	}
	o.remote.addFlags(cmd, false)
	f := cmd.Flags()
	f.StringArrayVarP(&o.params, "param", "p", nil, "argument NAME=VALUE (repeatable)")
	f.StringVarP(&o.data, "data", "d", "", "arguments as a JSON object, or @FILE, or @- for stdin")
	f.StringVar(&o.key, "idempotency-key", "", "send this Idempotency-Key (record it durably first)")
	f.StringVar(&o.task, "task", "", "durable task name: journal a new key on the first run, re-send it on later runs")
	f.VarPF(&o.dryRun, "dry-run", "", "preview the operation (dryRun=true); never with a key").NoOptDefVal = "true"
	f.DurationVar(&o.wait, "wait", 0, "send Prefer: wait=N: let the server wait up to this long (at most 30s) for a running original with the same key")
	f.IntVar(&o.retries, "retries", client.DefaultRetries, "automatic retries after the first request, where the retry contract allows them")
	f.DurationVar(&o.retryTimeout, "retry-timeout", client.DefaultRetryTimeout, "no automatic retry starts after this long")
	_ = cmd.RegisterFlagCompletionFunc("param", m.completeParam(&o))
	return cmd
}

// dryRunFlag is --dry-run: given alone it means true; a value is parsed as
// the server parses the dryRun parameter (exactly true or false), and the
// flag is given at most once.
type dryRunFlag struct{ on, set bool }

func (d *dryRunFlag) Set(s string) error {
	if d.set {
		return errors.New("give --dry-run once")
	}
	on, err := idem.ParseDryRun([]string{s})
	if err != nil {
		return fmt.Errorf("want true or false, got %q", s)
	}
	d.on, d.set = on, true
	return nil
}

func (d *dryRunFlag) String() string { return strconv.FormatBool(d.on) }
func (d *dryRunFlag) Type() string   { return "bool" }

// param is one --param as given.
type param struct{ name, text string }

// call runs idem call.
func (m Main) call(ctx context.Context, operation string, o callOptions) error {
	if o.retries < 0 {
		return usagef("--retries must be 0 or more, got %d", o.retries)
	}
	if o.retryTimeout <= 0 {
		return usagef("--retry-timeout must be positive, got %s", o.retryTimeout)
	}
	if o.wait < 0 {
		return usagef("--wait must not be negative, got %s", o.wait)
	}
	if o.key != "" && o.task != "" {
		return usagef("use --idempotency-key or --task, not both")
	}
	if o.task != "" && strings.TrimSpace(o.task) != o.task {
		return usagef("--task %q: a task name has no leading or trailing spaces", o.task)
	}
	s, err := m.session(o.remote, client.WithReadRetries(retriesOption(o.retries), o.retryTimeout))
	if err != nil {
		return err
	}
	params, err := parseParams(o.params)
	if err != nil {
		return err
	}
	data, err := m.readData(o.data)
	if err != nil {
		return err
	}
	args, err := mergeArgs(params, data)
	if err != nil {
		return err
	}
	c := &callRun{session: s, operation: operation, args: args, opts: o}

	// Intents refused before anything is sent.
	if e := idem.KeyWithDryRun(o.key != "" || o.task != "", o.dryRun.on); e != nil {
		flag := "--idempotency-key"
		if o.task != "" {
			flag = "--task"
		}
		return s.fail(client.RefusedError(e.Code, operation, map[string]any{"dryRun": true},
			"%s cannot be used with --dry-run: %s", flag, e.Message), c.hints)
	}
	key := o.key
	var journal *client.FileJournal
	var entry client.Entry
	if o.task != "" {
		fp, err := client.TaskFingerprint(operation, args)
		if err != nil {
			return usagef("the arguments cannot be fingerprinted: %v", err)
		}
		entry = client.Entry{Task: o.task, Operation: operation, Fingerprint: fp}
		dir, err := client.JournalDir(m.Getenv)
		if err != nil {
			return usagef("--task needs the attempt journal: %v", err)
		}
		if journal, err = client.OpenFileJournal(dir); err != nil {
			return err
		}
		old, found, err := journal.Get(o.task)
		if err != nil {
			return err
		}
		if found {
			if !old.SameIntent(entry) {
				return s.fail(taskConflict(entry, old, journal.Path()), c.hints)
			}
			key, entry = old.Key, old
			fmt.Fprintf(m.Stderr, "Task %s: re-sending its journaled key %s (first run %s).\n", o.task, key, old.CreatedAt.Local().Format(time.RFC3339))
		}
	}

	cat, err := s.client.Catalog(ctx)
	if err != nil {
		return s.fail(err, c.hints)
	}
	c.catalog = cat
	if op, ok := cat.Operation(operation); ok {
		c.op = &op
		coerceStrings(args, params, op.PropertyTypes())
		if o.task != "" && key == "" {
			if op.Retry.Kind != idem.RetrySameKeyReplay {
				return s.fail(client.RefusedError(idem.CodeIdempotencyKeyNotSupported, operation, map[string]any{"retryKind": op.Retry.Kind},
					"--task journals an idempotency key, and %s takes none: its retry contract is %s, not same_key_replay; call it without --task", operation, op.Retry.Kind), c.hints)
			}
			entry.Key, entry.CreatedAt = newKey(), time.Now().UTC()
			err := journal.Put(entry)
			var conflict *client.TaskConflictError
			switch {
			case errors.As(err, &conflict) && conflict.Existing.SameIntent(entry):
				entry = conflict.Existing // a concurrent run of the task journaled it first
			case errors.As(err, &conflict):
				return s.fail(taskConflict(entry, conflict.Existing, journal.Path()), c.hints)
			case err != nil:
				return fmt.Errorf("journal the key of task %s: %w", o.task, err)
			default:
				fmt.Fprintf(m.Stderr, "Task %s: journaled new key %s in %s.\n", o.task, entry.Key, journal.Path())
			}
			key = entry.Key
		}
	}
	c.key = key

	res, err := s.client.Call(ctx, operation, args, client.CallOptions{
		IdempotencyKey: key, DryRun: o.dryRun.on, Wait: o.wait, Retries: retriesOption(o.retries), RetryTimeout: o.retryTimeout,
	})
	if err != nil {
		return s.fail(err, c.hints)
	}
	if res.Replayed() {
		fmt.Fprintln(m.Stderr, c.replayNote(res))
	}
	return s.succeed(res.Body, func(w io.Writer) { c.resultTable(w, res) })
}

// retriesOption maps --retries to CallOptions.Retries (0 there means the
// default, a negative number none).
func retriesOption(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// taskConflict is the refusal of a --task run whose intent differs from
// the journaled one: the problem the server would answer had the key been
// sent (422 IDEMPOTENCY_KEY_REUSED), marked local.
func taskConflict(want, journaled client.Entry, path string) *client.Error {
	return client.RefusedError(idem.CodeIdempotencyKeyReused, want.Operation, map[string]any{
		"task": want.Task, "idempotencyKey": journaled.Key, "journaledOperation": journaled.Operation,
		"journaledFingerprint": journaled.Fingerprint, "fingerprint": want.Fingerprint, "journal": path,
	}, "task %q is journaled with key %s for another intent (%s with other arguments); nothing was sent: re-run the task's original command, or use a new task name for a new intent",
		want.Task, journaled.Key, journaled.Operation)
}

// parseParams reads the --param flags.
func parseParams(list []string) ([]param, error) {
	out := make([]param, 0, len(list))
	seen := map[string]bool{}
	for _, p := range list {
		name, text, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, usagef("--param %q: want NAME=VALUE", p)
		}
		if seen[name] {
			return nil, usagef("--param %s is given twice", name)
		}
		seen[name] = true
		out = append(out, param{name, text})
	}
	return out, nil
}

// paramValue types a --param value without the schema: a JSON number,
// true/false, or a JSON string literal as given; anything else a string.
func paramValue(text string) json.RawMessage {
	t := strings.TrimSpace(text)
	switch {
	case t == "true" || t == "false":
		return json.RawMessage(t)
	case t != "" && (t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) && json.Valid([]byte(t)):
		return json.RawMessage(t)
	case len(t) >= 2 && t[0] == '"' && json.Valid([]byte(t)):
		return json.RawMessage(t)
	}
	raw, _ := json.Marshal(text)
	return raw
}

// coerceStrings sends as strings the --param values of arguments the
// schema types as strings (so --param name=2024 stays "2024").
func coerceStrings(args map[string]json.RawMessage, params []param, types map[string]string) {
	for _, p := range params {
		if types[p.name] != "string" {
			continue
		}
		if raw := args[p.name]; len(raw) > 0 && raw[0] != '"' {
			args[p.name], _ = json.Marshal(p.text)
		}
	}
}

// readData reads --data: inline JSON, @FILE, or @- for stdin; it must be
// one JSON object.
func (m Main) readData(spec string) (map[string]json.RawMessage, error) {
	if spec == "" {
		return nil, nil
	}
	raw := []byte(spec)
	if name, ok := strings.CutPrefix(spec, "@"); ok {
		var err error
		if name == "-" {
			raw, err = io.ReadAll(m.Stdin)
		} else {
			raw, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, usagef("--data %s: %v", spec, err)
		}
	}
	if _, err := canonical.Transform(raw); err != nil {
		return nil, usagef("--data is not acceptable JSON: %v", err)
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, usagef("--data must be a JSON object of arguments")
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &out); err != nil {
		return nil, usagef("--data: %v", err)
	}
	return out, nil
}

// mergeArgs merges the parameters and the data into the flat argument
// object; a name in both is refused.
func mergeArgs(params []param, data map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	args := make(map[string]json.RawMessage, len(params)+len(data))
	for k, v := range data {
		args[k] = v
	}
	for _, p := range params {
		if _, dup := args[p.name]; dup {
			return nil, usagef("argument %s is given both in --data and as --param", p.name)
		}
		args[p.name] = paramValue(p.text)
	}
	return args, nil
}

// callRun is one idem call, for its hints and tables.
type callRun struct {
	*session
	operation string
	args      map[string]json.RawMessage
	opts      callOptions
	catalog   *client.Catalog
	op        *client.Operation
	key       string
}

// reconcile returns the reconcile command of the call's operation (from
// the problem's details first), or "".
func (c *callRun) reconcile(e *client.Error) string {
	name := ""
	if e != nil {
		name = e.Reconcile()
	}
	if name == "" && c.op != nil {
		name = c.op.Retry.Reconcile
	}
	if name == "" {
		return ""
	}
	var rop *client.Operation
	if c.catalog != nil {
		if op, ok := c.catalog.Operation(name); ok {
			rop = &op
		}
	}
	return reconcileCommand(name, rop, c.args)
}

// sameCommand names how to re-run this call with its key.
func (c *callRun) sameCommand() string {
	switch {
	case c.opts.task != "":
		return "the same command (task " + c.opts.task + " re-sends key " + c.key + ")"
	case c.key != "":
		return "the same command with the same --idempotency-key " + c.key
	}
	return "the same command"
}

// hints is what to do next after e.
func (c *callRun) hints(e *client.Error) []string {
	rec := c.reconcile(e)
	kind := idem.RetryKind("")
	if c.op != nil {
		kind = c.op.Retry.Kind
	}
	switch {
	case e.Refused && e.Code == idem.CodeIdempotencyKeyReused:
		return []string{"Nothing was sent. Re-run the task with its original operation and arguments, or pick a new --task name for a new intent."}
	case e.Refused:
		return []string{"Nothing was sent."}
	case e.Code == idem.CodeIdempotencyResultIndeterminate, e.Code == idem.CodeIdempotencyResultExpired,
		e.Status >= 500 && (e.Status != http.StatusServiceUnavailable || !e.Retryable):
		out := []string{}
		if rec != "" {
			out = append(out, "Reconcile first: "+rec)
		}
		if e.Code == idem.CodeIdempotencyResultExpired {
			out = append(out, "The one-time result is no longer kept and the operation will not run again under this key.")
		}
		return append(out, "Use a new key (or a new --task) only if the current state proves the change is still needed.")
	case e.Code == idem.CodeNetworkError:
		out := []string{fmt.Sprintf("No HTTP answer from %s after %d request(s).", c.client.Server(), e.Requests)}
		switch {
		case kind == idem.RetrySameKeyReplay && c.key != "":
			out = append(out, "Run "+c.sameCommand()+" once the server answers: the key makes the retry safe.")
			if rec != "" {
				out = append(out, "Before reporting state, reconcile: "+rec)
			}
		case kind == idem.RetryFreshRead || kind == "":
			out = append(out, "Run the same command again once the server answers.")
		case rec != "":
			out = append(out, "The outcome is unknown. Reconcile first ("+rec+") and repeat only if the state still differs.")
		default:
			out = append(out, "The outcome is unknown; this operation is never retried automatically (retry.kind "+string(kind)+").")
		}
		return out
	case e.Code == idem.CodeIdempotencyKeyInFlight:
		return []string{"The original request with this key is still running. Run " + c.sameCommand() + " later, or add --wait 30s."}
	case e.Code == idem.CodeStoreUnavailable:
		return []string{"The server ran nothing and the key is not consumed: run " + c.sameCommand() + " later."}
	case e.Code == idem.CodeApprovalRequired:
		id := e.ApprovalID()
		return []string{
			fmt.Sprintf("Approval %s is pending. An approver runs: idem approvals approve %s", id, id),
			"Then run " + c.sameCommand() + ": the approved intent executes once.",
		}
	case e.Code == idem.CodeApprovalRejected:
		return []string{"An approver rejected this exact request (see details.reason). Change the request, or wait until the approval expires to ask again."}
	case e.Code == idem.CodeIdempotencyKeyRequired:
		return []string{
			fmt.Sprintf("%s replays by key: record a key before the first live call. Let the CLI journal one: idem call %s … --task NAME", c.operation, c.operation),
			"or record your own (idem key new) and pass --idempotency-key KEY.",
		}
	case e.Code == idem.CodeIdempotencyKeyReused:
		return []string{"This key already names a different request. Re-send the original request unchanged, or use a new key for a new intent."}
	case e.Code == idem.CodeIdempotencyKeyNotSupported:
		return []string{fmt.Sprintf("%s takes no idempotency key (retry.kind %s): remove --idempotency-key / --task.", c.operation, dash(string(kind)))}
	case e.Code == idem.CodeOperationNotFound:
		return []string{"List the operations with: idem operations list"}
	}
	return defaultHints(e)
}

// replayNote is the stderr line of a replayed answer.
func (c *callRun) replayNote(res *client.Result) string {
	exec := ""
	if m := res.Envelope.Meta; m != nil {
		exec = m.ExecutionID
	}
	note := fmt.Sprintf("Replayed: the original result of execution %s (historical proof of that attempt, not current state).", exec)
	if rec := c.reconcile(nil); rec != "" {
		note += "\nCurrent state: " + rec
	}
	return note
}

// resultTable prints a success for people.
func (c *callRun) resultTable(w io.Writer, res *client.Result) {
	meta := res.Envelope.Meta
	if meta == nil {
		meta = &idem.Meta{}
	}
	kv(w, "operation", c.operation, "status", fmt.Sprintf("%d %s", res.Status, http.StatusText(res.Status)),
		"execution", meta.ExecutionID)
	if meta.Attempts > 0 {
		kv(w, "attempts", fmt.Sprint(meta.Attempts))
	}
	if meta.DryRun {
		kv(w, "dry run", "yes: nothing changed")
	}
	if id := meta.Idempotency; id != nil {
		state := "first answer"
		if id.Replayed {
			state = "replayed"
		}
		kv(w, "key", id.Key+" ("+state+")")
	}
	fmt.Fprintf(w, "data\n  %s\n", indentJSON(res.Envelope.Data, "  "))
}
