package mysql

// SetBeforeCommit sets the hook run between a fenced transaction's lease
// check and its COMMIT; nil removes it.
func SetBeforeCommit(f func()) { beforeCommit = f }
