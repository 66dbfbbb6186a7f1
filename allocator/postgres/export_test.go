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

// CustomPlanned names the SegmentLogStatements that run in a give-back's
// transaction, which lockTagSQL has planned for its parameters: they never
// get a generic plan.
var CustomPlanned = map[string]bool{
	"give back a caller's tail":   true,
	"record a caller's give-back": true,
	"read a request's holder":     true,
}

// OpenMeasured is Open with the estimator the pool's round trips feed, so
// that a test controls its clock.
var OpenMeasured = open
