package migrate

import (
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"m/002_second.up.sql": {Data: []byte("B")},
		"m/001_first.up.sql":  {Data: []byte("A")},
		"m/README.md":         {Data: []byte("ignored")},
	}
	got, err := Load(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != 1 || got[0].Name != "first" || got[0].SQL != "A" || got[1].Version != 2 {
		t.Fatalf("Load = %+v", got)
	}
	pending := Pending(got, map[int]bool{1: true})
	if len(pending) != 1 || pending[0].Version != 2 {
		t.Fatalf("Pending = %+v", pending)
	}
}

func TestLoadRejectsDuplicateVersions(t *testing.T) {
	fsys := fstest.MapFS{
		"m/001_a.up.sql": {Data: []byte("A")},
		"m/1_b.up.sql":   {Data: []byte("B")},
	}
	if _, err := Load(fsys, "m"); err == nil {
		t.Fatal("Load accepted two files for version 1")
	}
}

func TestLoadRejectsEmpty(t *testing.T) {
	if _, err := Load(fstest.MapFS{"m/x.sql": {}}, "m"); err == nil {
		t.Fatal("Load accepted a directory without migrations")
	}
}
