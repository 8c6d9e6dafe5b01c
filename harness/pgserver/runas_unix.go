//go:build unix

package pgserver

import "syscall"

// runAs returns the attributes that run a process as uid and gid.
func runAs(uid, gid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
}
