//go:build !linux

package zklockbench_test

import "testing"

func benchServer(b *testing.B) string {
	b.Skip("the benchmarks start ZooKeeper from Debian's jars: Linux only")
	return ""
}
