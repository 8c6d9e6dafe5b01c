package postgres

// SetBeforeCommit sets a function to run between the lease check and the
// COMMIT of a fenced transaction.
func SetBeforeCommit(f func()) { beforeCommit = f }
