package harness

import (
	"flag"
	"fmt"
	"os"
)

// exampleNeed is a shared server the package's Example functions use.
type exampleNeed struct {
	what string
	warm func() (skip string, err error)
}

var exampleNeeds []exampleNeed // set before Main, read by Main

// ExamplesNeed declares a shared server the package's Example functions
// use; backend packages wrap it (redisserver.ExamplesNeed and so on), and
// TestMain calls those before [Main]:
//
//	func TestMain(m *testing.M) {
//		etcdserver.ExamplesNeed()
//		harness.Main(m)
//	}
//
// An Example gets no *testing.T and so cannot skip: Main therefore calls
// warm, which starts the server, before any test runs; when it reports a
// skip message, Main skips every Example of the package (go test's
// -test.skip) with that message — or, under FENCEGUARD_REQUIRE_SERVERS=1,
// fails the package. An error from warm fails the package.
func ExamplesNeed(what string, warm func() (skip string, err error)) {
	exampleNeeds = append(exampleNeeds, exampleNeed{what, warm})
}

// prepareExamples starts the servers the examples need, or skips the
// examples. A non-nil error fails the package.
func prepareExamples() error {
	for _, n := range exampleNeeds {
		skip, err := n.warm()
		if err != nil {
			return fmt.Errorf("harness: a %s server for the examples: %w", n.what, err)
		}
		if skip == "" {
			continue
		}
		if os.Getenv(EnvRequireServers) == "1" {
			return fmt.Errorf("%s (failing instead of skipping the examples: %s=1)", skip, EnvRequireServers)
		}
		if !flag.Parsed() {
			flag.Parse()
		}
		pat := "^Example"
		if cur := flag.Lookup("test.skip"); cur != nil && cur.Value.String() != "" {
			pat = cur.Value.String() + "|" + pat
		}
		if err := flag.Set("test.skip", pat); err != nil {
			return fmt.Errorf("harness: skipping the examples: %w", err)
		}
		fmt.Fprintf(os.Stderr, "harness: skipping this package's examples: %s\n", skip)
		return nil
	}
	return nil
}

// ExampleID is [UniqueID] for an Example function's share of a shared
// server. It panics when the package's TestMain does not call [Main].
func ExampleID() string {
	if !mainCalled.Load() {
		panic("harness: an example's package must call harness.Main(m) from TestMain")
	}
	return UniqueID() + "-example"
}

// ExampleUnavailable panics with why an Example has no server of kind
// what: skip (its package did not declare it with ExamplesNeed) or err
// (starting it failed). The panic fails the example with the reason.
func ExampleUnavailable(what, skip string, err error) {
	if err == nil {
		err = fmt.Errorf("%s (declare it with ExamplesNeed in TestMain)", skip)
	}
	panic(fmt.Sprintf("harness: no %s server for this example: %v", what, err))
}
