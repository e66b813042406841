package demo

import "testing"

func TestRebind(t *testing.T) {
	pg, sqlite := &DB{dialect: "postgres"}, &DB{dialect: "sqlite"}
	for _, tc := range []struct{ q, want string }{
		{"SELECT 1", "SELECT 1"},
		{"INSERT INTO t (a, b) VALUES (?, ?)", "INSERT INTO t (a, b) VALUES ($1, $2)"},
		{"?", "$1"},
		{"é ? ü ?,?,?,?,?,?,?,?,?,?", "é $1 ü $2,$3,$4,$5,$6,$7,$8,$9,$10,$11"},
	} {
		if got := pg.rebind(tc.q); got != tc.want {
			t.Errorf("rebind(%q) = %q, want %q", tc.q, got, tc.want)
		}
		if got := sqlite.rebind(tc.q); got != tc.q {
			t.Errorf("SQLite rebind(%q) = %q", tc.q, got)
		}
	}
}
