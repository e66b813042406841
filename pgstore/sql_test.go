package pgstore

import (
	"io/fs"
	"strings"
	"testing"
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
	for name, q := range map[string]string{"complete_attempt": completeSQL, "complete_set": completeSetSQL, "release": releaseSQL} {
		if !strings.Contains(q, notify) {
			t.Errorf("%s does not notify %s", name, completedChannel)
		}
	}
	if listenSQL != "LISTEN "+completedChannel {
		t.Errorf("listen.sql is %q, want LISTEN %s", listenSQL, completedChannel)
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
