package main

import (
	"fmt"
	"strings"
)

// phaseTitles names the rows of the tables.
var phaseTitles = map[string]string{
	"ceiling":       "ceiling (same route shape, no idempotency)",
	"first":         "first keyed executions (fresh keys; business.create, transactional: one commit), on a fresh store",
	"first-warm":    "the same after warm-up (on the store the previous row left)",
	"first-2p":      "first keyed executions, two-phase (fresh keys, an order of its own per request; order.refund)",
	"replay":        "replays of completed keys (those of `first`, mostly out of the replay cache when the phase starts)",
	"replay-recent": "replays of recent keys (each client's newest 100 of `first`, in the replay cache)",
	"floor":         "the floor: a minimal durable keyed handler (parse, SHA-256, one transaction: key row + business row)",
	"raw":           "raw store limit (INSERT + UPDATE pairs)",
}

var phaseOrder = []string{"ceiling", "first", "first-warm", "first-2p", "replay", "replay-recent", "floor", "raw"}

// markdown renders the results: a side-by-side summary, then every
// measurement per store, then the storms.
func (r Results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## idem benchmark, %s\n\n", r.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "`%s` · %d clients · %s per phase", r.Command, r.Clients, r.Duration)
	if len(r.Stores) > 0 {
		fmt.Fprintf(&b, " · storm of %d", r.Storm)
	}
	fmt.Fprintf(&b, " · %d CPUs (%s), %s RAM · %s", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemTotal, r.Machine.Go)
	if r.PostgreSQL != "" {
		fmt.Fprintf(&b, " · %s", r.PostgreSQL)
	}
	if r.Prefill > 0 {
		fmt.Fprintf(&b, " · %d keys retained before the phases (--prefill)", r.Prefill)
	}
	if r.PGParams != "" {
		fmt.Fprintf(&b, " · servers' PostgreSQL URL + `%s`", r.PGParams)
	}
	fmt.Fprintf(&b, "\n\nDurability: %s\n\n", r.Durability)
	if r.Tracing != "" {
		fmt.Fprintf(&b, "Tracing: %s\n\n", r.Tracing)
	}
	if len(r.Stores) > 0 {
		r.storesMarkdown(&b)
	}
	proxyTable.markdown(&b, r.Proxy)
	gatewayTable.markdown(&b, r.Gateway)
	return b.String()
}

// storesMarkdown renders the stores' phases and storms.
func (r Results) storesMarkdown(b *strings.Builder) {
	// Side by side: requests per second (×ceiling, ×raw).
	b.WriteString("### Side by side: requests/s (ratio to the ceiling · ratio to the raw limit · ratio to the floor)\n\n| |")
	for _, s := range r.Stores {
		fmt.Fprintf(b, " %s |", storeTitle(s))
	}
	b.WriteString("\n|---|")
	for range r.Stores {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, ph := range phaseOrder {
		fmt.Fprintf(b, "| %s |", phaseTitles[ph])
		for _, s := range r.Stores {
			row, ok := s.row(ph)
			if !ok {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(b, " %.0f (%.2f× · %.2f× · %s) |", row.PerSecond, row.VsCeiling, row.VsRaw, blank(row.VsFloor, "%.2f×"))
		}
		b.WriteString("\n")
	}
	b.WriteString("| p99 added latency at half the peak keyed rate (first@half p99 − ceiling@half p99) |")
	for _, s := range r.Stores {
		row, ok := s.row("first@half")
		if !ok {
			b.WriteString(" – |")
			continue
		}
		fmt.Fprintf(b, " %.1f ms at %.0f/s |", row.AddedP99Ms, row.PacedAt)
	}
	b.WriteString("\n")
	b.WriteString("| p99 added over the floor at half the peak keyed rate (first@half p99 − floor@half p99) |")
	for _, s := range r.Stores {
		row, ok := s.row("first@half")
		if _, paced := s.row("floor@half"); !ok || !paced {
			b.WriteString(" – |")
			continue
		}
		fmt.Fprintf(b, " %.1f ms |", row.OverFloorP99Ms)
	}
	b.WriteString("\n")
	for _, wait := range []bool{false, true} {
		if wait {
			fmt.Fprintf(b, "| same-key storm, Prefer: wait=5 |")
		} else {
			fmt.Fprintf(b, "| same-key storm, no wait |")
		}
		for _, s := range r.Stores {
			st := s.Storm
			if wait {
				st = s.StormWait
			}
			fmt.Fprintf(b, " %d execution(s), %d replays, %d × 409", st.Executions, st.Replays, st.InFlight)
			if st.Other+st.Errors > 0 {
				fmt.Fprintf(b, ", %d other", st.Other+st.Errors)
			}
			if wait {
				fmt.Fprintf(b, "; waiters after original p50 %.1f / p99 %.1f ms", st.WaitP50Ms, st.WaitP99Ms)
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}

	// Counts per request: the same on a busy machine as on a quiet one.
	b.WriteString("\n### Counts per request (sequential scans of idem's tables (rows they read) · statements the database ran · idem store calls · server heap allocations · replay cache hit ratio)\n\n| |")
	for _, s := range r.Stores {
		fmt.Fprintf(b, " %s |", storeTitle(s))
	}
	b.WriteString("\n|---|")
	for range r.Stores {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, ph := range phaseOrder {
		fmt.Fprintf(b, "| %s |", ph)
		for _, s := range r.Stores {
			row, ok := s.row(ph)
			if !ok {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(b, " %s (%s) · %s · %s · %s · %s |", orDash(row.SeqScansPerReq, "%.3f"), orDash(row.SeqRowsPerReq, "%.1f"), orDash(row.StatementsPerReq, "%.1f"),
				dash(row.StoreCallsPerReq, "%.2f"), dash(row.AllocsPerReq, "%.0f"), orDash(row.CacheHitRatio, "%.2f"))
		}
		b.WriteString("\n")
	}

	b.WriteString("\n### Every measurement\n\n")
	b.WriteString("| store | phase | req/s | p50 ms | p99 ms | p99.9 ms | server CPU µs/req | server RSS MB | bytes/key | ×ceiling | ×raw | ×floor | errors |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Stores {
		for _, row := range s.Rows {
			fmt.Fprintf(b, "| %s | %s | %.0f | %.2f | %.2f | %.2f | %s | %s | %s | %.2f | %.2f | %s | %d |\n",
				storeTitle(s), row.Phase, row.PerSecond, row.P50Ms, row.P99Ms, row.P999Ms,
				blank(row.CPUPerReqUs, "%.0f"), blank(row.RSSMB, "%.0f"), blank(row.BytesPerKey, "%.0f"),
				row.VsCeiling, row.VsRaw, blank(row.VsFloor, "%.2f"), row.Errors)
		}
	}

	b.WriteString("\n### Same-key storms\n\n")
	b.WriteString("| store | Prefer | requests | executions | distinct executionIds | replays | 409 in flight | other | waiters after original p50 / p99 / max ms | storm ms |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, s := range r.Stores {
		for i, st := range []stormResult{s.Storm, s.StormWait} {
			prefer := "–"
			if i == 1 {
				prefer = "wait=5"
			}
			fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %d | %d | %d | %.1f / %.1f / %.1f | %.0f |\n",
				storeTitle(s), prefer, st.Requests, st.Executions, st.ExecutionIDs, st.Replays, st.InFlight,
				st.Other+st.Errors, st.WaitP50Ms, st.WaitP99Ms, st.WaitMaxMs, st.ElapsedMs)
		}
	}
	for _, s := range r.Stores {
		for _, row := range s.Rows {
			if row.FirstError != "" {
				fmt.Fprintf(b, "\n%s %s, first error: `%.200s`\n", s.Store, row.Phase, row.FirstError)
			}
		}
		for _, st := range []stormResult{s.Storm, s.StormWait} {
			if st.FirstOther != "" {
				fmt.Fprintf(b, "\n%s storm, first unexpected answer: `%.200s`\n", s.Store, st.FirstOther)
			}
		}
	}
}

func (s StoreResult) row(phase string) (Row, bool) {
	for _, r := range s.Rows {
		if r.Phase == phase {
			return r, true
		}
	}
	return Row{}, false
}

func storeTitle(s StoreResult) string {
	switch s.Store {
	case "sqlite":
		return "SQLite"
	case "pg":
		return "PostgreSQL"
	case "pg2":
		return "PostgreSQL ×2 instances"
	}
	return s.Store
}

// orDash formats *v, or "–" when it was not measured.
func orDash(v *float64, format string) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf(format, *v)
}

// dash formats v, or "–" when it is 0 (not measured).
func dash(v float64, format string) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func blank(v float64, format string) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(format, v)
}
