package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/client"
)

// defaultServer is the server the commands talk to without --server or
// IDEM_SERVER.
const defaultServer = "http://127.0.0.1:8080"

// remoteOptions are the flags of every command that talks to a server.
type remoteOptions struct {
	server string
	token  string
	format string
}

// addFlags registers --server, --token and --format on cmd, as
// persistent flags when its subcommands share them.
func (o *remoteOptions) addFlags(cmd *cobra.Command, persistent bool) {
	f := cmd.Flags()
	if persistent {
		f = cmd.PersistentFlags()
	}
	f.StringVar(&o.server, "server", "", "server URL (env IDEM_SERVER; default "+defaultServer+")")
	f.StringVar(&o.token, "token", "", "bearer token (env IDEM_TOKEN)")
	f.StringVar(&o.format, "format", "", "output: json (the server's object, alone on stdout) or table (for people); default json when stdout is not a terminal")
}

// session is what a server command works with: the client and the
// resolved output format.
type session struct {
	m      Main
	client *client.Client
	format string
}

// serverAndToken resolves --server and --token: the flag, else IDEM_SERVER
// (defaultServer) and IDEM_TOKEN.
func (m Main) serverAndToken(server, token string) (string, string) {
	if server == "" {
		server = m.envOr("IDEM_SERVER", defaultServer)
	}
	if token == "" {
		token = m.Getenv("IDEM_TOKEN")
	}
	return server, token
}

// session resolves the flags and environment into a client.
func (m Main) session(o remoteOptions, opts ...client.Option) (*session, error) {
	format, err := m.outputFormat(o.format)
	if err != nil {
		return nil, err
	}
	server, token := m.serverAndToken(o.server, o.token)
	c, err := client.New(server, token, append([]client.Option{client.WithUserAgent("idem-cli/" + buildVersion())}, opts...)...)
	if err != nil {
		return nil, usagef("--server: %v", err)
	}
	return &session{m: m, client: c, format: format}, nil
}

// outputFormat resolves --format: json or table, json by default when
// stdout is not a terminal.
func (m Main) outputFormat(flag string) (string, error) {
	switch flag {
	case "json", "table":
		return flag, nil
	case "":
		if isTerminal(m.Stdout) {
			return "table", nil
		}
		return "json", nil
	}
	return "", usagef("--format must be json or table, got %q", flag)
}

// isTerminal reports whether w is a character device (a terminal). Any
// writer that is not an *os.File is not.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printJSON writes the server's bytes alone on stdout, ending the line if
// they do not.
func (s *session) printJSON(raw []byte) error {
	if _, err := s.m.Stdout.Write(raw); err != nil {
		return err
	}
	if len(raw) == 0 || raw[len(raw)-1] != '\n' {
		_, err := io.WriteString(s.m.Stdout, "\n")
		return err
	}
	return nil
}

// succeed prints a success: the raw bytes with --format json, table(w)
// with --format table.
func (s *session) succeed(raw []byte, table func(w io.Writer)) error {
	if s.format == "json" {
		return s.printJSON(raw)
	}
	tw := tabwriter.NewWriter(s.m.Stdout, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// fail reports err and returns the exit status to end with. A client
// error prints its problem object on stdout (--format json) and, on
// stderr, "Error [CODE]: detail" and the hints; any other error is
// returned for report.
func (s *session) fail(err error, hints func(*client.Error) []string) error {
	var e *client.Error
	if !errors.As(err, &e) {
		return err
	}
	if s.format == "json" {
		if perr := s.printJSON(e.Problem); perr != nil {
			return perr
		}
	}
	if e.Code == "" { // a proxied upstream's own answer (client.Error.Upstream)
		fmt.Fprintf(s.m.Stderr, "Error: %s\n", e.Message)
	} else {
		fmt.Fprintf(s.m.Stderr, "Error [%s]: %s\n", e.Code, e.Message)
	}
	var lines []string
	if hints != nil {
		lines = hints(e)
	}
	if len(lines) == 0 {
		lines = defaultHints(e)
	}
	for _, l := range lines {
		fmt.Fprintln(s.m.Stderr, l)
	}
	return exitStatus(exitCode(e))
}

// defaultHints is what to do next after e, from the code alone.
func defaultHints(e *client.Error) []string {
	switch {
	case e.Code == idem.CodeNetworkError:
		return []string{"No HTTP answer arrived: check --server (or IDEM_SERVER) and that the server runs, then run the same command again."}
	case e.Code == idem.CodeApprovalRequired && e.ApprovalID() != "":
		return []string{fmt.Sprintf("Approval %s is pending: an approver runs `idem approvals approve %s`; then run this same command again.", e.ApprovalID(), e.ApprovalID())}
	case e.Code == idem.CodeUnauthenticated:
		return []string{"Pass a token with --token or IDEM_TOKEN."}
	case e.Code.Known():
		return []string{e.Code.Info().Action}
	}
	return nil
}

// kv prints aligned "name  value" lines, skipping empty values.
func kv(w io.Writer, pairs ...string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			fmt.Fprintf(w, "%s\t%s\n", pairs[i], pairs[i+1])
		}
	}
}

// indentJSON renders raw JSON for people, indented by two spaces.
func indentJSON(raw []byte, prefix string) string {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, prefix, "  ") != nil {
		return string(raw)
	}
	return buf.String()
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format(time.RFC3339)
}

func timePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return timeString(*t)
}

func strPtr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// safeWord matches a shell word that needs no quoting.
var safeWord = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if safeWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// reconcileCommand is the idem command that runs the read operation
// reconcile with the arguments of args it takes: the command to run before
// reporting state. op describes reconcile when the catalog has it.
func reconcileCommand(reconcile string, op *client.Operation, args map[string]json.RawMessage) string {
	cmd := "idem call " + reconcile
	if op == nil {
		return cmd
	}
	names := op.Properties()
	sort.Strings(names)
	for _, name := range names {
		raw, ok := args[name]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(raw)
		}
		cmd += " --param " + shellQuote(name+"="+s)
	}
	return cmd
}
