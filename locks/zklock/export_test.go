package zklock

// RenewSkipsSync turns the sync before Renew's Exists off (true) or on, for
// control runs that show what the sync prevents. It returns a function that
// restores the previous setting.
func RenewSkipsSync(skip bool) (restore func()) {
	old := renewSkipsSync.Swap(skip)
	return func() { renewSkipsSync.Store(old) }
}
