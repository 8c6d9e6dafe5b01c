//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// shmidDS is struct shmid64_ds of the 64-bit Linux ABIs that share the
// generic layout (amd64, arm64, riscv64, loong64); golang.org/x/sys/unix
// calls it SysvShmDesc. Other architectures lay it out differently and skip
// the cleanup (shm_other.go).
type shmidDS struct {
	Key    int32 // ipc64_perm
	UID    uint32
	GID    uint32
	CUID   uint32
	CGID   uint32
	Mode   uint32
	Seq    uint16
	_      uint16
	_      uint64
	_      uint64
	Segsz  uint64
	Atime  int64
	Dtime  int64
	Ctime  int64
	Cpid   int32
	Lpid   int32
	Nattch uint64
	_      uint64
	_      uint64
}

const (
	ipcRMID = 0
	ipcSTAT = 2
)

// shmStat returns a System V shared memory segment's key and number of
// attached processes; ok is false when it does not exist.
func shmStat(id int) (key int64, nattch uint64, ok bool) {
	var ds shmidDS
	_, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcSTAT, uintptr(unsafe.Pointer(&ds)))
	if errno != 0 {
		return 0, 0, false
	}
	return int64(ds.Key), ds.Nattch, true
}

func shmRemove(id int) {
	syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcRMID, 0)
}

// cleanupStaleShm removes the System V shared memory segments of PostgreSQL
// servers under dir whose processes are gone. A postmaster that was killed
// cannot remove its segment; normally the next start in the same data
// directory does, but the harness deletes the directory instead.
func cleanupStaleShm(dir string) {
	pids, _ := filepath.Glob(filepath.Join(dir, "*", "data", "postmaster.pid"))
	for _, path := range pids {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) < 7 {
			continue
		}
		f := strings.Fields(lines[6]) // "key shmid"
		if len(f) != 2 {
			continue
		}
		key, err1 := strconv.ParseInt(f[0], 10, 64)
		id, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		if k, n, ok := shmStat(id); ok && k == key && n == 0 {
			shmRemove(id)
		}
	}
}
