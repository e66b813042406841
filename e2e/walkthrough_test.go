package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The walk-throughs of the docs are tested against the built binary: every
// ```console block of the pages below is run, in order, in one bash
// session per page, and each command's output must match the lines the
// page shows under it (stdout and stderr together). Ids, keys, secrets,
// times and ports are masked on both sides; "…" in a shown line stands for
// any text. A stale page fails here, not in a newcomer's hands.
//
// A block's lines starting with "$ " are commands (continued by a trailing
// backslash or a here-document); the lines up to the next command are its
// output. A command ending in " &" runs in the background: its output is
// what it printed up to "listening on" when the page shows that line, else
// once it printed as many lines as the page shows. The session
// runs in a temporary directory holding bin/idem and the upstream of
// e2e/testdata/upstream, with HOME there too; `go run ./cmd/idem` runs the
// binary. A page that runs npm's MCP servers (docs/gateway.md) gets the
// pinned install of the gateway tests as node_modules beside it (and
// e2e/testdata/tsclient.mjs), so that
// `npx -y @modelcontextprotocol/server-memory@VERSION` runs it, and npm set
// offline: the run never reaches the registry (a version the install does not
// hold fails). Without node and npm it skips, as the gateway tests do.
// Every file a page's commands write must be one .gitignore covers.
var walkthroughs = []struct {
	page string
	// ports are the ports the page names; each is mapped to a free one.
	ports []string
	// demo: the page's commands call an `idem serve --demo` on ports[0],
	// which the test starts (the page starts it in a ```sh block).
	demo bool
	// npm: the page runs the pinned npm MCP servers and the TypeScript SDK.
	npm bool
}{
	{page: "README.md", ports: []string{"8080"}, demo: true},
	{page: "docs/cli.md"},
	{page: "docs/proxy.md", ports: []string{"9000", "8081"}},
	{page: "docs/gateway.md", ports: []string{"8082", "8083", "9000"}, npm: true},
}

func TestWalkthroughs(t *testing.T) {
	for _, w := range walkthroughs {
		t.Run(strings.ReplaceAll(w.page, "/", "_"), func(t *testing.T) {
			t.Parallel()
			for _, tool := range []string{"bash", "curl", "jq", "python3"} {
				if _, err := exec.LookPath(tool); err != nil {
					if os.Getenv("CI") == "true" {
						t.Fatalf("%s is not on PATH: the walk-throughs need bash, curl, jq and python3 (scripts/test.sh installs them on CI)", tool)
					}
					t.Skipf("%s is not on PATH: the walk-throughs need bash, curl, jq and python3 (CI=true makes this a failure)", tool)
				}
			}
			data, err := os.ReadFile(filepath.Join("..", w.page))
			if err != nil {
				t.Fatal(err)
			}
			steps := parseConsole(string(data))
			if len(steps) == 0 {
				t.Fatalf("%s has no ```console block", w.page)
			}
			npm := ""
			if w.npm {
				npm = filepath.Join(mcpServers(t), "node_modules")
			}
			runWalkthrough(t, w.page, w.ports, w.demo, npm, steps)
		})
	}
}

// step is one command of a console block and the output the page shows.
type step struct {
	line    int // of the command in the page
	command string
	output  []string
}

var hereDoc = regexp.MustCompile(`<<-?'?([A-Z]+)'?`)

// parseConsole returns the commands of every ```console block of page.
func parseConsole(page string) []step {
	var steps []step
	lines := strings.Split(page, "\n")
	in := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !in {
			in = strings.TrimSpace(l) == "```console"
			continue
		}
		if strings.TrimSpace(l) == "```" {
			in = false
			continue
		}
		cmd, ok := strings.CutPrefix(l, "$ ")
		if !ok {
			if len(steps) > 0 {
				steps[len(steps)-1].output = append(steps[len(steps)-1].output, l)
			}
			continue
		}
		s := step{line: i + 1, command: cmd}
		for strings.HasSuffix(lines[i], `\`) && i+1 < len(lines) {
			i++
			s.command += "\n" + lines[i]
		}
		if m := hereDoc.FindStringSubmatch(cmd); m != nil {
			for i+1 < len(lines) {
				i++
				s.command += "\n" + lines[i]
				if lines[i] == m[1] {
					break
				}
			}
		}
		steps = append(steps, s)
	}
	return steps
}

// masks replace what differs on every run, on both sides.
var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"time":"[^"]*",`), ``}, // JSON log lines (the pages leave it out)
	{regexp.MustCompile(`\b(exe|apr|ik)_[a-z2-7]{26}\b`), `${1}_ID`},
	{regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), `UUID`},
	{regexp.MustCompile(`\bidem_[A-Za-z0-9_-]{20,}`), `idem_SECRET`},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), `TIME`},
	{regexp.MustCompile(`(?m)^Date: .*$`), `Date: DATE`},
	{regexp.MustCompile(`(?m)^Content-Length: \d+$`), `Content-Length: N`},
	{regexp.MustCompile(`(?m)^Server: .*$`), `Server: SERVER`},
	{regexp.MustCompile(`\(\d+(\.\d+)?(ms|µs|s)\)`), `(DURATION)`},
}

func mask(s string) string {
	for _, m := range masks {
		s = m.re.ReplaceAllString(s, m.with)
	}
	return s
}

// learned are the ids a page shows (exe_…, apr_…, keys) that its later
// commands name, each mapped to the id this run got in its place.
var learnable = regexp.MustCompile(`\b(exe|apr)_[a-z2-7]{26}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)

// runWalkthrough runs steps in a temporary directory; npm, when not empty,
// is the node_modules of the pinned npm packages.
func runWalkthrough(t *testing.T, page string, docPorts []string, demo bool, npm string, steps []step) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	for _, d := range []string{home, filepath.Join(dir, "bin"), filepath.Join(dir, "e2e", "testdata")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(binary, filepath.Join(dir, "bin", "idem")); err != nil {
		t.Fatal(err)
	}
	upstream, err := filepath.Abs(filepath.Join("testdata", "upstream"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(upstream, filepath.Join(dir, "e2e", "testdata", "upstream")); err != nil {
		t.Fatal(err)
	}
	if npm != "" {
		ts, err := filepath.Abs(filepath.Join("testdata", "tsclient.mjs"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ts, filepath.Join(dir, "e2e", "testdata", "tsclient.mjs")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(npm, filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		// HOME's .npmrc reaches npx in the upstreams the gateway spawns too
		// (HOME is in their environment's allow-list).
		if err := os.WriteFile(filepath.Join(home, ".npmrc"), []byte("offline=true\nupdate-notifier=false\nfund=false\naudit=false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Each port the page names gets a free one; outputs are mapped back.
	ports := map[string]string{}
	for _, p := range docPorts {
		ports[p] = freePort(t)
	}
	toRun := func(s string) string {
		for doc, real := range ports {
			s = regexp.MustCompile(`\b`+doc+`\b`).ReplaceAllString(s, real)
		}
		return s
	}
	toDoc := func(s string) string {
		for doc, real := range ports {
			s = regexp.MustCompile(`\b`+real+`\b`).ReplaceAllString(s, doc)
		}
		return strings.ReplaceAll(s, home, "$HOME")
	}
	env := append(os.Environ(), "HOME="+home, "XDG_STATE_HOME=", "IDEM_JOURNAL=", "IDEM_TOKEN=", "IDEM_STORE=", "IDEM_ADDR=", "NO_COLOR=1")
	if demo {
		s := start(t, dir, "serve", "--demo", "--addr", "127.0.0.1:"+ports[docPorts[0]], "--store", "sqlite:"+filepath.Join(dir, "idem.db"),
			"--secret-key-file", filepath.Join(dir, "idem.key"))
		env = append(env, "IDEM_SERVER="+s.url)
	}

	sh := newShell(t, dir, env)
	learned := map[string]string{}
	for _, st := range steps {
		cmd := st.command
		for doc, real := range learned {
			cmd = strings.ReplaceAll(cmd, doc, real)
		}
		cmd = toRun(cmd)
		var got string
		if bg, ok := strings.CutSuffix(cmd, " &"); ok {
			listens := slices.ContainsFunc(st.output, func(l string) bool { return strings.HasPrefix(l, "listening on ") })
			got = sh.background(t, bg, len(st.output), listens)
		} else {
			got = sh.run(t, cmd)
		}
		got = toDoc(got)
		gotLines := strings.Split(strings.TrimSuffix(strings.ReplaceAll(got, "\r", ""), "\n"), "\n")
		if got == "" {
			gotLines = nil
		}
		want := st.output
		for len(want) > 0 && want[len(want)-1] == "" { // blank lines before the fence
			want = want[:len(want)-1]
		}
		if msg := compare(want, gotLines); msg != "" {
			t.Errorf("%s:%d: $ %s\n%s\n--- the page shows:\n%s\n--- the binary printed:\n%s", page, st.line, st.command, msg,
				strings.Join(want, "\n"), strings.Join(gotLines, "\n"))
		}
		// Ids the page shows stand for the ones this run got.
		for i := 0; i < min(len(want), len(gotLines)); i++ {
			w, g := learnable.FindAllString(want[i], -1), learnable.FindAllString(gotLines[i], -1)
			for j := 0; j < min(len(w), len(g)); j++ {
				learned[w[j]] = g[j]
			}
		}
	}
	checkIgnored(t, page, dir)
}

// checkIgnored fails for every file the page's commands wrote into dir
// that the repository's .gitignore does not cover: the pages are run from
// the repository's root (issue 37 item 5).
func checkIgnored(t *testing.T, page, dir string) {
	t.Helper()
	if err := exec.Command("git", "-C", "..", "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Logf("no git work tree (%v): the files %s writes are not checked against .gitignore", err, page)
		return
	}
	var written []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case rel == "bin", rel == "e2e", rel == "home", rel == "node_modules", strings.HasPrefix(rel, ".background-"):
			if d.IsDir() {
				return filepath.SkipDir // the test's own
			}
			return nil
		case !d.IsDir():
			written = append(written, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) == 0 {
		return
	}
	cmd := exec.Command("git", "check-ignore", "--no-index", "--stdin")
	cmd.Dir = ".."
	cmd.Stdin = strings.NewReader(strings.Join(written, "\n") + "\n")
	out, err := cmd.Output() // exit status 1: none is ignored
	if err != nil && cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("git check-ignore: %v", err)
	}
	ignored := strings.Fields(string(out))
	for _, f := range written {
		if !slices.Contains(ignored, f) {
			t.Errorf("%s writes %s, which .gitignore does not cover: run from the repository's root, it would be left there untracked", page, f)
		}
	}
}

// compare matches shown lines against printed ones, masked; "…" in a shown
// line matches any text.
func compare(want, got []string) string {
	if len(want) != len(got) {
		return fmt.Sprintf("the page shows %d lines, the binary printed %d", len(want), len(got))
	}
	for i := range want {
		w, g := mask(want[i]), mask(got[i])
		parts := strings.Split(w, "…")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		if !regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`).MatchString(g) {
			return fmt.Sprintf("line %d differs:\n  shown:   %s\n  printed: %s", i+1, w, g)
		}
	}
	return ""
}

// shell is one bash session, its output read command by command.
type shell struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	dir string
	n   int
}

func newShell(t *testing.T, dir string, env []string) *shell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its background jobs end with it
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		r.Close()
	})
	s := &shell{cmd: cmd, in: in, out: bufio.NewReader(r), dir: dir}
	// `go run ./cmd/idem` is the binary under test.
	s.run(t, `go() { if [[ $1 == run && $2 == ./cmd/idem ]]; then shift 2; bin/idem "$@"; else command go "$@"; fi; }`)
	return s
}

// run runs command and returns what it printed.
func (s *shell) run(t *testing.T, command string) string {
	t.Helper()
	s.n++
	marker := fmt.Sprintf("__walkthrough_done_%d__", s.n)
	if _, err := fmt.Fprintf(s.in, "%s\nprintf '%s\\n'\n", command, marker); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var b strings.Builder
		for {
			line, err := s.out.ReadString('\n')
			if before, ok := strings.CutSuffix(line, marker+"\n"); ok {
				b.WriteString(before)
				done <- result{b.String(), nil}
				return
			}
			b.WriteString(line)
			if err != nil {
				done <- result{b.String(), err}
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("$ %s: the shell ended (%v) after printing:\n%s", command, r.err, r.out)
		}
		return r.out
	case <-ctx.Done():
		t.Fatalf("$ %s: no end within a minute", command)
		return ""
	}
}

// background starts command in the background and returns what it
// printed up to its "listening on" line when listens, else once it printed
// lines lines.
func (s *shell) background(t *testing.T, command string, lines int, listens bool) string {
	t.Helper()
	s.n++
	fifo := filepath.Join(s.dir, fmt.Sprintf(".background-%d", s.n))
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Its output arrives line by line on the FIFO, read until it ends (the
	// process exits, or the session ends with the test).
	got := make(chan string)
	go func() {
		f, err := os.Open(fifo) // until the shell opens it for writing
		if err != nil {
			close(got)
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			got <- sc.Text() + "\n"
		}
		close(got)
	}()
	s.run(t, fmt.Sprintf("{ %s\n} >%s 2>&1 &", command, fifo))
	var out strings.Builder
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for n := 0; ; n++ {
		if !listens && n >= lines {
			go func() { // keep draining, so that it never blocks on a full FIFO
				for range got {
				}
			}()
			return out.String()
		}
		select {
		case line, ok := <-got:
			if !ok {
				return out.String()
			}
			out.WriteString(line)
			if listens && strings.HasPrefix(line, "listening on ") {
				go func() {
					for range got {
					}
				}()
				return out.String()
			}
		case <-timeout.C:
			t.Fatalf("$ %s: after 30 s it printed:\n%s", command, out.String())
		}
	}
}
