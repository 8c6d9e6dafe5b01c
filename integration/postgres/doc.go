// Package postgres checks storage/postgres against a real PostgreSQL:
// the context-token rule (enforce.Resolve) in Table, Fence and Tx, the hold
// bound of a transaction, tombstones and their pruning, isolation levels,
// racing updates with conditions, and misuse of Reset. Calls against a
// frozen or delayed server are in package frozen.
package postgres
