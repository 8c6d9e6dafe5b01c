package httpmw

// LockedKeys returns how many keys m's per-key serialization holds entries
// for: those held or waited for.
func LockedKeys(m *Middleware) int {
	if m.locks == nil {
		return 0
	}
	return m.locks.len()
}
