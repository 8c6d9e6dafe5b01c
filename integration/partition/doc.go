// Package partition checks zklock on a 3-member ZooKeeper ensemble whose
// members are cut off, frozen or killed: the holder learns of the loss
// (Lost closed, Renew failing) before the next holder is granted, its
// Deadline does not outlast that grant, the Fence orders claims through
// the leader, and the next token is larger.
//
// Network cuts shape the loopback device with tc (htb at 8 bit/s for
// chosen ports): those tests need root and tc, and remove the qdisc when
// they end.
package partition
