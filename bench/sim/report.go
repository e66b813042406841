package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

func printModel(w io.Writer, o options, r results, s storeRows, m Model, measuredBatch float64) {
	fmt.Fprintf(w, "### Output of bench/sim\n\n`go run ./bench/sim %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(w, "Measured by `%s` (%d clients, %s phases) on %d cores (%s), load generator on the same machine; %s. File `%s`.\n\n",
		r.Command, r.Clients, r.Duration, r.Machine.CPUs, r.Machine.CPUModel, r.PostgreSQL, o.results)

	fmt.Fprintf(w, "#### Measured per request (store %s, %d instance(s))\n\n", s.store, s.instances)
	fmt.Fprintln(w, "| phase | req/s | idem CPU µs | PostgreSQL CPU µs | load generator CPU µs | write tx | WAL bytes | database growth bytes |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range []row{s.first, s.replay, s.raw} {
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f |\n",
			x.Phase, x.PerSecond, x.ServerCPUUs, x.DBCPUUs, x.LoadCPUUs, x.WriteTx, x.WALBytes, x.DBGrowth)
	}
	fmt.Fprintf(w, "\nRetained key: %.0f bytes (`idem_records` heap, TOAST, indexes per key held) with a %.0f-byte stored answer. "+
		"Raw limit: %.0f write transactions/s, PostgreSQL and load generator keeping %.2f cores busy, the machine %.2f of %d. "+
		"Batching factor in the measurement: %.2f.\n\n",
		s.first.BytesPerKey, s.first.StoredAnswer, s.commitRate(),
		s.raw.PerSecond*(s.raw.DBCPUUs+s.raw.LoadCPUUs)/1e6, s.raw.MachineCPUs, r.Machine.CPUs, measuredBatch)

	fmt.Fprintf(w, "#### Model: %.0f%% replays, batching factor %.2f, %g-core primaries, %g-core idem instances",
		100*m.ReplayFraction, o.batch, m.DBCores, m.InstanceCores)
	if m.Instances > 0 {
		fmt.Fprintf(w, ", %d instances in total", m.Instances)
	}
	fmt.Fprintf(w, ", %.0f-byte answers, %s retention\n\n", m.Answer, m.Retention)
	for _, b := range m.ShardBounds() {
		fmt.Fprintf(w, "- one shard, %s: %.0f/s\n", b.Resource, b.Rate)
	}
	one := m.Capacity(1)
	fmt.Fprintf(w, "- **one shard holds %.0f keyed requests/s; bound: %s**\n", one.Rate, one.Resource)
	fmt.Fprintf(w, "- one idem instance: %.0f/s (CPU); %d instance(s) per saturated shard\n", m.InstanceRate(), m.InstancesFor(one.Rate))
	fmt.Fprintf(w, "- one retained key: %.0f bytes\n\n", m.KeyBytes())

	fmt.Fprintf(w, "| shards | keyed requests/s | bound | idem instances at that rate | holds %.0f/s | retained storage per shard at %.0f/s |\n", o.target, o.target)
	fmt.Fprintln(w, "|---:|---:|---|---:|---|---:|")
	for n := 1; n <= o.maxShards; n *= 2 {
		c := m.Capacity(n)
		holds := "no"
		if c.Rate >= o.target {
			holds = "yes"
		}
		fmt.Fprintf(w, "| %d | %.0f | %s | %d | %s | %s |\n", n, c.Rate, c.Resource, m.InstancesFor(c.Rate), holds, bytesString(m.Storage(o.target)/float64(n)))
	}
	fmt.Fprintf(w, "\n#### At %.0f keyed requests/s\n\n", o.target)
	if n := m.ShardsFor(o.target); n > 0 {
		fmt.Fprintf(w, "- **shards needed: %d** (each at %.0f%% of its bound)\n", n, 100*o.target/m.Capacity(n).Rate)
	} else {
		fmt.Fprintf(w, "- the %d instances cannot carry it (%.0f/s at most)\n", m.Instances, float64(m.Instances)*m.InstanceRate())
	}
	inst := m.InstancesFor(o.target)
	fmt.Fprintf(w, "- idem instances needed: %d (%g cores each)\n", inst, m.InstanceCores)
	if n := m.ShardsFor(o.target); n > 0 {
		fmt.Fprintf(w, "- connections per primary: %d if every instance pools %d to every shard (a routing store); %d with one deployment of %d instance(s) per shard\n",
			inst*o.pool, o.pool, ceilDiv(inst, n)*o.pool, ceilDiv(inst, n))
	}
	fmt.Fprintf(w, "- **retained attempt records: %s** (%.3g keys × %.0f bytes)\n",
		bytesString(m.Storage(o.target)), o.target*(1-m.ReplayFraction)*m.Retention.Seconds(), m.KeyBytes())
	fmt.Fprintf(w, "- WAL written (and shipped to standbys): %s/s, %s/day\n",
		bytesString(m.WALPerSecond(o.target)), bytesString(86400*m.WALPerSecond(o.target)))
	// The database grows by more than the retained key per request:
	// executions and audit events, kept for the audit retention, and the
	// handler's own rows, which are the application's to keep.
	f := m.ReplayFraction
	if g := (1-f)*(s.first.DBGrowth-s.first.BytesPerKey) + f*s.replay.DBGrowth; g > 0 {
		fmt.Fprintf(w, "- executions, audit events and the handler's rows: ~%.0f bytes per request, %s/day; "+
			"executions and events leave after --audit-retention (%s), so at steady state at most %s (an upper bound: the handler's rows are counted too, and are the application's to keep)\n",
			g, bytesString(86400*o.target*g), o.auditRetention, bytesString(o.auditRetention.Seconds()*o.target*g))
	}
	fmt.Fprintln(w)
}

func printCheck(w io.Writer, cores float64, one, two storeRows, m Model) {
	fmt.Fprintln(w, "#### Check: two idem instances on one PostgreSQL (harness store pg2), first executions")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "On the measured machine the server(s), PostgreSQL and the load generator share its %g cores with other work; "+
		"cores left = %g − (machine busy − this run's processes).\n\n", cores, cores)
	fmt.Fprintln(w, "| | req/s | idem + PostgreSQL + load generator CPU µs | this run's cores | machine busy | cores left |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, s := range []storeRows{one, two} {
		d := s.first.demand()
		fmt.Fprintf(w, "| measured, %d instance(s) | %.0f | %.0f + %.0f + %.0f | %.2f | %.2f | %.2f |\n",
			s.instances, s.first.PerSecond, d.InstanceCPUUs, d.DBCPUUs, d.LoadCPUUs, ours(s), s.first.MachineCPUs, left(s, cores))
	}
	free := OneBox(one.first.demand(), cores, one.commitRate())
	pred := OneBox(one.first.demand(), left(two, cores), one.commitRate())
	own := OneBox(two.first.demand(), left(two, cores), two.commitRate())
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- one box, 1-instance costs, all %g cores: %.0f/s (%s)\n", cores, free.Rate, free.Resource)
	fmt.Fprintf(w, "- **2 instances predicted from 1-instance costs and the cores left during pg2: %.0f/s (%s); measured %.0f/s, ratio %.2f**\n",
		pred.Rate, pred.Resource, two.first.PerSecond, two.first.PerSecond/pred.Rate)
	fmt.Fprintf(w, "- with the 2 instances' own costs: %.0f/s, ratio %.2f\n", own.Rate, two.first.PerSecond/own.Rate)
	fmt.Fprintf(w, "- per-request cost, 2 instances ÷ 1: idem CPU %.2f, PostgreSQL CPU %.2f\n",
		two.first.ServerCPUUs/one.first.ServerCPUUs, two.first.DBCPUUs/one.first.DBCPUUs)
	fmt.Fprintf(w, "- separate machines (the model above, 1 shard): 1 instance %.0f/s, 2 instances %.0f/s\n\n",
		withInstances(m, 1).Capacity(1).Rate, withInstances(m, 2).Capacity(1).Rate)
}

// ours is the cores a store's first phase kept busy: server(s), PostgreSQL
// and load generator.
func ours(s storeRows) float64 {
	d := s.first.demand()
	return s.first.PerSecond * (d.InstanceCPUUs + d.DBCPUUs + d.LoadCPUUs) / 1e6
}

// left is the cores the first phase could have had: the machine's, less
// what other work on it used.
func left(s storeRows, cores float64) float64 {
	if s.first.MachineCPUs == 0 {
		return cores
	}
	return math.Min(cores, cores-(s.first.MachineCPUs-ours(s)))
}

func withInstances(m Model, n int) Model {
	m.Instances = n
	return m
}

// bytesString formats n bytes in binary units.
func bytesString(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
