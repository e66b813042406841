package pipeline

import "time"

// ValueCount is valueCount, for the tests.
var ValueCount = valueCount

// ShortenAuditBackoff sets the audit queue's first pause after a failed
// write to d, for the tests.
func ShortenAuditBackoff(r *Runner, d time.Duration) { r.audit.backoff = d }
