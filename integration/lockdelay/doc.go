// Package lockdelay checks the lockers' lock-delay with a real pause: a
// holder process frozen with SIGSTOP past its lease, for less than the
// lease plus the delay, makes its late write to an unfenced resource (a
// file it appends to) before any other holder's first write; the same
// schedule without the delay shows the overlap — the next holder writes
// while the frozen one still believes it holds the lock, and its late
// write lands after — so the check can fail.
package lockdelay
