package metrics

import "github.com/prometheus/client_golang/prometheus"

// NameAuditDropped names the counter of audit items the runner gave up
// writing (issue 33 item 9).
const NameAuditDropped = "idem_audit_dropped_total"

// AuditDropper is a runner that counts the audit items it dropped;
// *pipeline.Runner is.
type AuditDropper interface {
	AuditDropped() int64
}

// RegisterAuditDropped exports r's count of dropped audit items: replay
// events and fresh reads' executions that the audit queue could not
// write, after its bounded retries while the store was unavailable, or at
// once when the store refused them. Anything above 0 is audit lost.
func RegisterAuditDropped(reg prometheus.Registerer, r AuditDropper) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: NameAuditDropped,
		Help: "Audit items (execution.replayed events, fresh reads' executions) the runner gave up writing after its retries.",
	}, func() float64 { return float64(r.AuditDropped()) }))
}
