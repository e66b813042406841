// Package migrate loads a store's embedded schema migrations: files named
// NNN_name.up.sql, applied in version order and recorded by version.
// Each store applies them with its own driver, in one transaction each.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
)

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// ID names m as its file does, without the suffix: "007_approval_rule".
func (m Migration) ID() string { return fmt.Sprintf("%03d_%s", m.Version, m.Name) }

var fileName = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.up\.sql$`)

// Load reads every NNN_name.up.sql file in dir of fsys, sorted by version.
// Other files are ignored; two files with one version are an error.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", dir, err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		version, _ := strconv.Atoi(m[1])
		if prev, dup := seen[version]; dup {
			return nil, fmt.Errorf("migrate: version %d used by %s and %s", version, prev, e.Name())
		}
		seen[version] = e.Name()
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: version, Name: m[2], SQL: string(body)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("migrate: no NNN_name.up.sql files in %s", dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Pending returns the migrations whose version is not in applied.
func Pending(all []Migration, applied map[int]bool) []Migration {
	var out []Migration
	for _, m := range all {
		if !applied[m.Version] {
			out = append(out, m)
		}
	}
	return out
}
