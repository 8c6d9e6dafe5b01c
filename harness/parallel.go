package harness

import (
	"flag"
	"strconv"
)

// DefaultParallel makes -test.parallel default to n instead of GOMAXPROCS,
// unless the command line sets it. A package whose tests wait on servers,
// leases and timeouts rather than use the CPU calls it first in TestMain,
// before Main: it parses the command line.
func DefaultParallel(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}
