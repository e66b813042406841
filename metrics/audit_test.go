package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type dropper int64

func (d *dropper) AuditDropped() int64 { return int64(*d) }

func TestAuditDroppedIsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := dropper(0)
	RegisterAuditDropped(reg, &d)
	d = 7
	want := `# HELP idem_audit_dropped_total Audit items (execution.replayed events, fresh reads' executions) the runner gave up writing after its retries.
# TYPE idem_audit_dropped_total counter
idem_audit_dropped_total 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NameAuditDropped); err != nil {
		t.Fatal(err)
	}
}
