package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Cluster is a private PostgreSQL server a test can stop and start again,
// for outage tests that must not disturb the shared test server.
type Cluster struct {
	t      testing.TB
	bindir string
	dir    string
	port   int
	runAs  string
}

// StartCluster initialises and starts a private cluster on a free port of
// 127.0.0.1 (as the postgres user, or nobody, when run as root), stopped
// and removed when the test ends. Without PostgreSQL binaries the test is
// skipped, or fails when IDEM_TEST_REQUIRE_PG=1.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bindir, err := serverBindir()
	if err != nil {
		unavailable(t, howToSet, "%v", err)
	}
	c := &Cluster{t: t, bindir: bindir}
	if os.Geteuid() == 0 {
		c.runAs = "nobody"
		if _, err := user.Lookup("postgres"); err == nil {
			c.runAs = "postgres"
		}
	}
	c.dir, err = os.MkdirTemp("", "idem-pgcluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.run("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop")
		os.RemoveAll(c.dir)
	})
	if c.runAs != "" {
		if out, err := exec.Command("chown", c.runAs, c.dir).CombinedOutput(); err != nil {
			t.Fatalf("pgtest: chown %s: %v %s", c.dir, err, out)
		}
	}
	if out, err := c.run("initdb", "-D", c.data(), "-U", "idem", "-A", "trust", "--no-sync"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	c.port = freePort(t)
	c.Start()
	return c
}

// URL is the cluster's admin URL (database postgres).
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://idem@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start() {
	c.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -k %s -c fsync=off", c.port, c.dir)
	if out, err := c.run("pg_ctl", "-D", c.data(), "-l", filepath.Join(c.dir, "log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		c.t.Fatalf("pgtest: start cluster: %v\n%s\n%s", err, out, log)
	}
}

// Stop stops the server at once (connections are cut).
func (c *Cluster) Stop() {
	c.t.Helper()
	if out, err := c.run("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop"); err != nil {
		c.t.Fatalf("pgtest: stop cluster: %v\n%s", err, out)
	}
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

// run runs a server binary, as the unprivileged user when root.
func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bindir, name)
	var cmd *exec.Cmd
	if c.runAs != "" {
		cmd = exec.Command("runuser", append([]string{"-u", c.runAs, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

// serverBindir finds the directory of initdb, pg_ctl and postgres.
func serverBindir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); exists(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if exists(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb) found")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
