package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Orders over overlapping SKUs, named in random orders, all end, and every
// unit sold belongs to a placed order; with little stock, some are refused.
func TestOrdersEndAndTakeAllOrNothing(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, options{Workers: 8, Orders: 60, SKUs: 4, Stock: 80}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "none deadlocked") || !strings.Contains(out.String(), "refused for stock") {
		t.Errorf("output:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

func TestOrdersRefuseBadOptions(t *testing.T) {
	if err := run(context.Background(), &bytes.Buffer{}, options{Workers: 1, Orders: 1, SKUs: 1}); err == nil {
		t.Error("one SKU accepted: an order needs two")
	}
}
