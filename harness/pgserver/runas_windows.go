package pgserver

import "syscall"

// runAs: Windows has no uid to run as (and no Geteuid of 0, so this is
// never asked); the harness refuses to start servers there anyway.
func runAs(uid, gid int) *syscall.SysProcAttr { return nil }
