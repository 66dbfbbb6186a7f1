package postgres

// SegmentLogStatements are the statements on the segment log that a
// caller can cause, by what they do: TestPostgres_SegmentLogPlans explains
// each on a large log.
var SegmentLogStatements = map[string]string{
	"allocate":                     allocateSQL,
	"lookup":                       lookupSQL,
	"give back a caller's tail":    giveBackRangeSQL,
	"record a caller's give-back":  returnedFromSQL,
	"read a request's holder":      holderOfSQL,
	"give back an instance's tail": giveBackSQL,
}

// OpenMeasured is Open with the estimator the pool's round trips feed, so
// that a test controls its clock.
var OpenMeasured = open
