package pipeline

// ValueCount is valueCount, for the tests.
var ValueCount = valueCount
