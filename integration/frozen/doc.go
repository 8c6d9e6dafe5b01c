// Package frozen checks every public call against a server that stops
// answering: frozen (SIGSTOP), blackholed (a proxy that keeps connections
// open and answers nothing) or delayed. Calls of the lockers, the guard
// runtime, storage/postgres and the HTTP middleware return by their
// context's deadline with the context's error; nothing is half written;
// a renewal in flight when Release gives up does not extend the lock; and
// the next grant's token is larger once the server thaws.
package frozen
