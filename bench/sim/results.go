package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// results is the part of a bench results file (bench/main.go's Results)
// that the model reads.
type results struct {
	Command    string `json:"command"`
	PostgreSQL string `json:"postgresql"`
	Clients    int    `json:"clients"`
	Duration   string `json:"phaseDuration"`
	Machine    struct {
		CPUs     int    `json:"nproc"`
		CPUModel string `json:"cpuModel"`
	} `json:"machine"`
	Stores []struct {
		Store     string `json:"store"`
		Instances int    `json:"instances"`
		Rows      []row  `json:"rows"`
	} `json:"stores"`
}

type row struct {
	Phase        string  `json:"phase"`
	PerSecond    float64 `json:"perSecond"`
	ServerCPUUs  float64 `json:"serverCpuPerRequestUs"`
	DBCPUUs      float64 `json:"dbCpuPerRequestUs"`
	LoadCPUUs    float64 `json:"loadCpuPerRequestUs"`
	WriteTx      float64 `json:"dbWriteTxPerRequest"`
	WALBytes     float64 `json:"walBytesPerRequest"`
	DBGrowth     float64 `json:"dbGrowthBytesPerRequest"`
	BytesPerKey  float64 `json:"bytesPerRetainedKey"`
	StoredAnswer float64 `json:"storedAnswerBytesPerKey"`
	MachineCPUs  float64 `json:"machineCpusBusy"`
}

func (r row) demand() Demand {
	return Demand{InstanceCPUUs: r.ServerCPUUs, DBCPUUs: r.DBCPUUs, LoadCPUUs: r.LoadCPUUs, WriteTx: r.WriteTx, WALBytes: r.WALBytes}
}

// storeRows is one store's first, replay and raw rows.
type storeRows struct {
	name, store        string
	instances          int
	first, replay, raw row
}

// commitRate is the raw limit's write transactions per second.
func (s storeRows) commitRate() float64 { return s.raw.PerSecond * s.raw.WriteTx }

func readResults(path string) (results, error) {
	var r results
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// store returns the rows of one store ("pg", "pg2"), checking that the file
// has the database measurements the model needs.
func (r results) store(name string) (storeRows, bool, error) {
	for _, s := range r.Stores {
		if s.Store != name {
			continue
		}
		sr := storeRows{name: name, store: s.Store, instances: s.Instances}
		for _, x := range s.Rows {
			switch x.Phase {
			case "first":
				sr.first = x
			case "replay":
				sr.replay = x
			case "raw":
				sr.raw = x
			}
		}
		for _, x := range []row{sr.first, sr.replay, sr.raw} {
			if x.PerSecond == 0 || x.WriteTx == 0 {
				return sr, true, fmt.Errorf("store %s: phase %q lacks the database measurements (dbWriteTxPerRequest); the file predates them: re-run go run ./bench", name, x.Phase)
			}
		}
		return sr, true, nil
	}
	return storeRows{}, false, nil
}

// newestResults is the newest bench/results/*.json (names are timestamps)
// that has store with the database measurements.
func newestResults(dir, store string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(m)
	for i := len(m) - 1; i >= 0; i-- {
		if r, err := readResults(m[i]); err == nil {
			if _, ok, err := r.store(store); ok && err == nil {
				return m[i], nil
			}
		}
	}
	return "", fmt.Errorf("no results in %s with store %s and its database measurements: run go run ./bench --stores pg,pg2 first, or pass --results", dir, store)
}
