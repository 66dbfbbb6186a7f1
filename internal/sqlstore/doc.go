// Package sqlstore holds what the two SQL backends of allocator.Store
// (allocator/postgres and allocator/sqlite) read and write the same way:
// the column lists of tags and tokens, the segment log's holder columns,
// and the answer of a holder-checked give-back. Their schemas are the same
// (migrations/); only the SQL dialects differ.
package sqlstore
