package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbSample is the database's side of a phase, read before and after it:
// the CPU of the throwaway cluster's processes, the write transactions it
// committed (next transaction id), the WAL it wrote (WAL position) and the
// database's size on disk. The
// load generator's own CPU is sampled with it. bench/sim reads the
// differences per request as the database's and the client's cost.
type dbSample struct {
	dbCPU   time.Duration // 0 unless the harness started the cluster
	loadCPU time.Duration
	machine time.Duration // every process of the machine (/proc/stat)
	at      time.Time
	xid     int64
	walLSN  int64
	dbSize  int64
	ok      bool
}

// sampleDB reads a dbSample through conn (nil: CPU only) and from /proc for
// the cluster whose postmaster is pid (0: none).
func sampleDB(ctx context.Context, conn *pgx.Conn, pid int) dbSample {
	s := loadSample()
	if pid > 0 {
		s.dbCPU = clusterCPU(pid)
	}
	if conn != nil {
		// pg_snapshot_xmax of the current snapshot is the next transaction id,
		// read without assigning one.
		err := conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
			(pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, pg_database_size(current_database())`).Scan(&s.xid, &s.walLSN, &s.dbSize)
		s.ok = err == nil
	}
	return s
}

// loadSample is a dbSample of the harness's and the machine's CPU only.
func loadSample() dbSample {
	return dbSample{loadCPU: readProc(os.Getpid()).cpu, machine: machineCPU(), at: time.Now()}
}

// machineCPU is the busy time of all CPUs from the first line of /proc/stat:
// user, nice, system, irq, softirq and steal (not idle, not iowait).
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var t int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		if i < len(f) {
			x, _ := strconv.ParseInt(f[i], 10, 64)
			t += x
		}
	}
	return time.Duration(t) * clockTick
}

// addDB fills r's database fields from two samples around it.
func addDB(r *Row, before, after dbSample) {
	if r.Requests == 0 {
		return
	}
	n := float64(r.Requests)
	r.LoadCPUPerReqUs = float64((after.loadCPU - before.loadCPU).Microseconds()) / n
	if d := after.at.Sub(before.at); d > 0 && after.machine > 0 {
		r.MachineCPUs = float64(after.machine-before.machine) / float64(d)
	}
	if after.dbCPU > 0 {
		r.DBCPUPerReqUs = float64((after.dbCPU - before.dbCPU).Microseconds()) / n
	}
	if before.ok && after.ok {
		r.DBWriteTxPerReq = float64(after.xid-before.xid) / n
		r.WALBytesPerReq = float64(after.walLSN-before.walLSN) / n
		r.DBGrowthPerReq = float64(after.dbSize-before.dbSize) / n
	}
}

// postmasterPID reads the first line of the data directory's postmaster.pid.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// clusterCPU is the CPU time of the postmaster, of its live children and of
// its children that have exited (cutime + cstime), from /proc.
func clusterCPU(pid int) time.Duration {
	total := procTicks(pid, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if ppid(child) == pid {
			total += procTicks(child, false)
		}
	}
	return total
}

// statFields returns the fields of /proc/PID/stat after the command name
// (f[0] is field 3), or nil.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// procTicks is utime + stime (fields 14, 15), and with reaped also cutime +
// cstime (16, 17), of pid.
func procTicks(pid int, reaped bool) time.Duration {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	n := 2
	if reaped {
		n = 4
	}
	var t int64
	for _, v := range f[11 : 11+n] {
		x, _ := strconv.ParseInt(v, 10, 64)
		t += x
	}
	return time.Duration(t) * clockTick
}

// storedBodyBytes is the mean size of the stored answers (headers and body)
// of the completed attempt records.
func storedBodyBytes(ctx context.Context, conn *pgx.Conn) float64 {
	var v *float64
	if err := conn.QueryRow(ctx, `SELECT avg(coalesce(octet_length(body), 0) + coalesce(octet_length(headers::text), 0))::float8
		FROM idem_records WHERE held AND state = 'completed'`).Scan(&v); err != nil || v == nil {
		return 0
	}
	return *v
}
