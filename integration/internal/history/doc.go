// Package history is what the fault-injection suite (integration/faults)
// records of a run and the checkers that judge it.
//
// A run's clients access several copies of each item — one per enforcer,
// fenced, and one per enforcer with fencing off, the control — and record
// every access ([Access]): who, in which critical section, with which token,
// when it was sent and answered, what it read or wrote, and what the resource
// answered. Each resource keeps its own log of the accesses it accepted, in
// the order it accepted them ([Accepted]): a trigger's sequence in
// PostgreSQL, a counter under the store's mutex in memory. Client times say
// when an access could have taken effect; only the resource's log says in
// which order it did.
//
// The checkers take one copy of one item ([Resource]) and return what is
// wrong with it ([Violation]); none of them trusts the clients' idea of who
// held the lock:
//
//   - [CheckInventory]: the stock never goes below zero, and the units sold
//     (writes of stock − 1 the resource accepted) equal the stock that left:
//     initial − final. A stale holder's accepted write shows as units sold
//     that never left the stock.
//   - [CheckRegister]: every critical section is a compare-and-set of the
//     item's value (it read v and wrote w under one lock); the history of
//     these and of the plain reads must be linearizable (porcupine), as it
//     is when critical sections never overlap in effect.
//   - [CheckTokens]: the tokens the resource accepted never decrease, in the
//     resource's own order.
//
// Each checker is tested against histories that must fail it: a check that
// cannot fail proves nothing.
package history
