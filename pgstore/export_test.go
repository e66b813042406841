package pgstore

import "time"

// PartitionSpan and PartitionsAhead let the tests compute the partitions
// they expect.
const (
	PartitionSpan   = partitionSpan
	PartitionsAhead = partitionsAhead
)

// SetSettleWait changes how long s waits for a fenced effect before it
// answers a record past its lease as still in flight.
func SetSettleWait(s *Store, d time.Duration) { s.settleWait = d }
