package sqlite

// SegmentLogStatements are the statements on the segment log that a
// caller can cause, by what they do: TestSQLite_SegmentLogPlans explains
// each on a large log.
var SegmentLogStatements = map[string]string{
	"allocate":                     logSQL,
	"lookup":                       lookupSQL,
	"give back a caller's tail":    giveBackRangeSQL,
	"record a caller's give-back":  returnedFromSQL,
	"read a request's holder":      holderOfSQL,
	"give back an instance's tail": markReturnedSQL,
}
