package pgstore

// PartitionSpan and PartitionsAhead let the tests compute the partitions
// they expect.
const (
	PartitionSpan   = partitionSpan
	PartitionsAhead = partitionsAhead
)

// InterpretError is the store's error translation, for table tests.
var InterpretError = interpretError
