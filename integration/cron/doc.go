// Package cron runs the worked example of examples/cron as its README
// shows it: the fenceguard program built from cmd/fenceguard, the inventory
// service of examples/inventory over PostgreSQL with Redis as the lock
// service, and the example's job scripts, by their path in the repository.
//
// It checks what the README claims: of two runs started at once, one runs
// its job and the other exits 75 (0 with --conflict-exit-code 0); a run
// frozen with SIGSTOP past its lease, fenceguard and job alike, has its
// job ended on SIGCONT (exit 77) or its late write refused with 409, and
// the stock is the initial stock less the sales of the runs that held the
// lock; the same frozen run with its job let out to write first is refused
// by the fenced service and loses an update at the unfenced one (the
// control: without fencing the schedule must show the lost update); and
// with --lock-delay the unfenced service loses nothing, because the next
// run is kept out until the frozen one has written.
//
// The freeze lands between the job's read and its write by construction,
// not by timing: the job waits there while a file exists, and says so.
package cron
