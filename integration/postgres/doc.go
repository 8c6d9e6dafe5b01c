// Package postgres checks storage/postgres against a real PostgreSQL:
// the context-token rule (enforce.Resolve) in Table, Fence and Tx, the hold
// bound of a transaction, tombstones and their pruning, isolation levels,
// racing updates with conditions, misuse of Reset, and transfers between
// accounts under TxAll with holders paused past their leases (and the
// same schedule unfenced, which loses money). Calls against a frozen or
// delayed server are in package frozen.
package postgres
