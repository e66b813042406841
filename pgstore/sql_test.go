package pgstore

import (
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// Every statement in sql/ is loaded by some variable: a file or section
// nobody sends is a leftover.
func TestEverySQLFileIsLoaded(t *testing.T) {
	files, err := fs.Glob(sqlFiles, "sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		b, err := sqlFiles.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		statements, err := parseSQL(string(b))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		file := strings.TrimSuffix(strings.TrimPrefix(path, "sql/"), ".sql")
		for name := range statements {
			if id := strings.TrimSuffix(file+":"+name, ":"); !loadedSQL[id] {
				t.Errorf("%s: statement %q is loaded by no variable", path, id)
			}
		}
	}
}

func TestParseSQL(t *testing.T) {
	got, err := parseSQL("-- doc\n\n-- more doc\nSELECT 1\n-- kept\nFROM x\n\n")
	if err != nil || len(got) != 1 || got[""] != "SELECT 1\n-- kept\nFROM x" {
		t.Errorf("one statement: %q, %v", got, err)
	}
	got, err = parseSQL("-- file doc\n\n-- name: a\n-- doc of a\nSELECT 1\n\n-- name: b\nSELECT 2\n")
	if err != nil || len(got) != 2 || got["a"] != "SELECT 1" || got["b"] != "SELECT 2" {
		t.Errorf("sections: %q, %v", got, err)
	}
	for _, bad := range []string{
		"",
		"-- only doc\n",
		"SELECT 1\n-- name: a\nSELECT 2\n",
		"-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n",
		"-- name: a\n-- name: b\nSELECT 2\n",
		"-- name: \nSELECT 1\n",
	} {
		if got, err := parseSQL(bad); err == nil && len(got) > 0 {
			t.Errorf("parseSQL(%q) = %q, want an error", bad, got)
		}
	}
}

// The statements write the names Go knows by constants as literals.
func TestSQLLiterals(t *testing.T) {
	notify := "pg_notify('" + completedChannel + "', "
	for name, q := range map[string]string{"complete_attempt": completeSQL.few, "complete_attempt_many_events": completeSQL.many,
		"complete_set": completeSetSQL, "release": releaseSQL} {
		if !strings.Contains(q, notify) {
			t.Errorf("%s does not notify %s", name, completedChannel)
		}
	}
	if listenSQL != "LISTEN "+completedChannel {
		t.Errorf("listen.sql is %q, want LISTEN %s", listenSQL, completedChannel)
	}
	started, consumed := "'"+idem.EventStarted+"'", "'"+idem.EventApprovalConsumed+"'"
	for name, q := range map[string]string{"start_execution": startExecutionSQL, "start_execution_with_approval": startApprovedExecutionSQL,
		"reserve": reserveSQL, "reserve_with_approval": reserveApprovedSQL, "insert_final": finalSQL} {
		if !strings.Contains(q, started) {
			t.Errorf("%s does not write %s", name, started)
		}
		if strings.Contains(name, "approval") != strings.Contains(q, consumed) {
			t.Errorf("%s: writes %s is %v", name, consumed, !strings.Contains(name, "approval"))
		}
	}
}

// The few forms of the statements with events take manyEvents slots of
// eventParams after their count.
func TestEventSlots(t *testing.T) {
	param := regexp.MustCompile(`\$([0-9]+)`)
	last := func(q string) int {
		n := 0
		for _, m := range param.FindAllStringSubmatch(q, -1) {
			k, _ := strconv.Atoi(m[1])
			n = max(n, k)
		}
		return n
	}
	for name, c := range map[string]struct {
		q     string
		count int // the parameter number of the count of events
	}{
		"finish_execution": {finishExecutionSQL.few, 7},
		"complete_attempt": {completeSQL.few, 16},
		"insert_final":     {finalSQL, 20},
	} {
		if want := c.count + manyEvents*eventParams; last(c.q) != want {
			t.Errorf("%s: last parameter $%d, want $%d", name, last(c.q), want)
		}
		if !strings.Contains(c.q, "r.n <= $"+strconv.Itoa(c.count)+"::int") {
			t.Errorf("%s does not filter its slots by $%d", name, c.count)
		}
	}
}

func TestPartitionFill(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for template, want := range map[string]string{
		createPartitionSQL: `CREATE TABLE "idem_attempts_p2026113012" PARTITION OF "idem_attempts" ` +
			`FOR VALUES FROM ('2026-11-30T12:00:00Z') TO ('2026-11-30T18:00:00Z')`,
		dropPartitionSQL: `DROP TABLE "idem_attempts_p2026113012"`,
		moveRowsSQL: `WITH moved AS (DELETE FROM "idem_attempts_default" WHERE "created_at" >= '2026-11-30T12:00:00Z' ` +
			`AND "created_at" < '2026-11-30T18:00:00Z' RETURNING *)` + "\n" + `INSERT INTO "idem_attempts_p2026113012" SELECT * FROM moved`,
	} {
		if got := attemptPartitions.fill(template, start); got != want {
			t.Errorf("fill(%q) =\n%s\nwant\n%s", template, got, want)
		}
	}
}

func TestMissingSQLPanics(t *testing.T) {
	for _, load := range []func(){
		func() { statement("no_such_file") },
		func() { section("sweep", "no_such_section") },
		func() { statement("sweep") },
		func() { section("ping", "one") },
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.HasPrefix(msg, "pgstore: ") {
					t.Errorf("panic %q, want a pgstore: message", msg)
				}
			}()
			load()
		}()
	}
}
