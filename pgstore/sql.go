package pgstore

import (
	"embed"
	"fmt"
	"strings"
)

// sqlFiles holds every statement the store sends (see the package doc).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// loadedSQL records each statement loaded, as "file" or "file:section",
// so that a test can tell a file or section nobody loads.
var loadedSQL = map[string]bool{}

// statement returns the one statement of sql/<file>.sql. It panics, at
// init, when the file is missing or holds sections.
func statement(file string) string {
	return loadSQL(file, "")
}

// section returns the statement of sql/<file>.sql that follows the line
// "-- name: <name>". It panics, at init, when there is none.
func section(file, name string) string {
	return loadSQL(file, name)
}

// loadSQL returns the statement of section name ("" for the file's one)
// of sql/<file>.sql, and records it in loadedSQL.
func loadSQL(file, name string) string {
	path := "sql/" + file + ".sql"
	b, err := sqlFiles.ReadFile(path)
	if err != nil {
		panic(fmt.Sprintf("pgstore: %v", err))
	}
	statements, err := parseSQL(string(b))
	if err != nil {
		panic(fmt.Sprintf("pgstore: %s: %v", path, err))
	}
	q, ok := statements[name]
	switch {
	case !ok && name == "":
		panic(fmt.Sprintf("pgstore: %s holds sections, not one statement", path))
	case !ok:
		panic(fmt.Sprintf("pgstore: %s has no section %q", path, name))
	}
	loadedSQL[strings.TrimSuffix(file+":"+name, ":")] = true
	return q
}

// parseSQL splits the text of a statement file by section: a file without
// "-- name: " lines holds one statement, under "". Comment and blank lines
// at the start of the file and of each section document it and are not
// sent; the rest of each, up to the next section, is the statement as it
// runs, without surrounding blank space.
func parseSQL(text string) (map[string]string, error) {
	bodies := map[string]*strings.Builder{"": {}}
	name := ""
	for line := range strings.Lines(text) {
		if n, ok := strings.CutPrefix(line, "-- name: "); ok {
			name = strings.TrimSpace(n)
			if _, dup := bodies[name]; dup || name == "" {
				return nil, fmt.Errorf("section %q is unnamed or named twice", name)
			}
			bodies[name] = &strings.Builder{}
			continue
		}
		body := bodies[name]
		if trimmed := strings.TrimSpace(line); body.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue // documentation
		}
		body.WriteString(line)
	}
	statements := map[string]string{}
	for name, body := range bodies {
		q := strings.TrimSpace(body.String())
		switch {
		case name == "" && len(bodies) > 1 && q != "":
			return nil, fmt.Errorf("a statement before the first section")
		case name == "" && len(bodies) > 1:
			continue // a file of sections
		case q == "" && name == "":
			return nil, fmt.Errorf("no statement")
		case q == "":
			return nil, fmt.Errorf("no statement in section %q", name)
		}
		statements[name] = q
	}
	return statements, nil
}
