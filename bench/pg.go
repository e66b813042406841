package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCluster is a throwaway PostgreSQL cluster in a temporary directory,
// started like scripts/test.sh starts one but with durability on: fsync,
// synchronous_commit and full_page_writes are the defaults (on), since the
// cost of durable commits is what the benchmark measures.
type pgCluster struct {
	dir     string
	pgCtl   string
	runUser string
	url     string
	version string
}

// pgBindir finds initdb, pg_ctl and postgres: `pg_config --bindir`, initdb
// on PATH, then the newest /usr/lib/postgresql/*/bin.
func pgBindir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(r), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries found (pg_config --bindir, initdb on PATH, /usr/lib/postgresql/*/bin); install PostgreSQL or pass --pg URL")
}

// startCluster initialises and starts a cluster under parent. As root it
// runs PostgreSQL as the postgres user (or nobody), which refuses root.
func startCluster(ctx context.Context, parent string) (*pgCluster, error) {
	bindir, err := pgBindir()
	if err != nil {
		return nil, err
	}
	c := &pgCluster{pgCtl: filepath.Join(bindir, "pg_ctl")}
	if out, err := exec.Command(filepath.Join(bindir, "postgres"), "-V").Output(); err == nil {
		c.version = strings.TrimSpace(string(out))
	}
	if os.Geteuid() == 0 {
		c.runUser = "nobody"
		if _, err := user.Lookup("postgres"); err == nil {
			c.runUser = "postgres"
		}
	}
	c.dir = filepath.Join(parent, "pg")
	if err := os.Mkdir(c.dir, 0o700); err != nil {
		return nil, err
	}
	if c.runUser != "" {
		u, err := user.Lookup(c.runUser)
		if err != nil {
			return nil, err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(c.dir, uid, gid); err != nil {
			return nil, err
		}
		// The parent temp dir must be reachable by that user.
		if err := os.Chmod(parent, 0o755); err != nil {
			return nil, err
		}
	}
	if out, err := c.as(filepath.Join(bindir, "initdb"), "-D", filepath.Join(c.dir, "data"), "-U", "idem", "-A", "trust", "-E", "UTF8", "--locale=C"); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if out, err := c.as("mkdir", filepath.Join(c.dir, "sock")); err != nil {
		return nil, fmt.Errorf("mkdir sock: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -k %s -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=400", port, filepath.Join(c.dir, "sock"))
	// pg_stat_statements, when the server has it (PostgreSQL's contrib),
	// counts the statements of each phase (counts.go).
	libdirs := []string{filepath.Join(filepath.Dir(bindir), "lib")}
	if out, err := exec.Command("pg_config", "--pkglibdir").Output(); err == nil {
		libdirs = append(libdirs, strings.TrimSpace(string(out)))
	}
	for _, dir := range libdirs {
		if _, err := os.Stat(filepath.Join(dir, "pg_stat_statements.so")); err == nil {
			opts += " -c shared_preload_libraries=pg_stat_statements"
			break
		}
	}
	if out, err := c.as(c.pgCtl, "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "postgres.log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
		return nil, fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	c.url = fmt.Sprintf("postgres://idem@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.url)
		if err == nil {
			conn.Close(ctx)
			break
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("PostgreSQL not ready after 30 s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	progressf("started %s on 127.0.0.1:%d (fsync=on, synchronous_commit=on)", c.version, port)
	return c, nil
}

// as runs a command in the cluster directory as the cluster's user.
func (c *pgCluster) as(name string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if c.runUser == "" {
		cmd = exec.Command(name, args...)
	} else {
		cmd = exec.Command("runuser", append([]string{"-u", c.runUser, "--", name}, args...)...)
	}
	cmd.Dir = c.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// stop stops the cluster at once; the caller removes its directory.
func (c *pgCluster) stop() {
	if _, err := c.as(c.pgCtl, "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "-t", "30", "stop"); err != nil {
		if b, err := os.ReadFile(filepath.Join(c.dir, "data", "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// createDatabase creates a fresh database named name on the server of
// adminURL and returns its URL.
func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
