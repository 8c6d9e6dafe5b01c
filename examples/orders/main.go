// Command orders places orders of several SKUs at once from many
// goroutines, each order under the locks of all its SKUs (guard.DoAll), and
// checks that every order took all of its units or none and that nothing
// deadlocked, though the orders name overlapping SKUs in random orders.
//
//	go run ./examples/orders
//	go run ./examples/orders -workers 16 -orders 200 -skus 4
//
// It needs nothing but Go: the locks are in-process (locks/memlock) and the
// stock is in memory behind a token.MemoryFence, each SKU fenced with its
// own lock's token. With a lock service, swap the Locker (locks/redislock,
// locks/etcdlock, …) and keep the stock in the store, fenced there
// (storage/postgres TxAll claims every SKU of an order in one transaction).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	var o options
	flag.IntVar(&o.Workers, "workers", 8, "goroutines placing orders")
	flag.IntVar(&o.Orders, "orders", 100, "orders each worker places")
	flag.IntVar(&o.SKUs, "skus", 5, "SKUs in the shop")
	flag.IntVar(&o.Stock, "stock", 300, "units of each SKU at the start")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

type options struct {
	Workers, Orders, SKUs, Stock int
}

// shop is the resource side: stock per SKU, each SKU fenced by its lock's
// token, so a holder whose lease was lost is refused rather than trusted.
type shop struct {
	fence token.MemoryFence
	mu    sync.Mutex
	stock map[string]int
	sold  map[string]int
}

// take takes one unit of every SKU, or none when one is sold out. Each SKU
// is first claimed with the token its own lock granted (the zero token:
// ctx carries every SKU's).
func (s *shop) take(ctx context.Context, skus []string) (bool, error) {
	for _, sku := range skus {
		if err := s.fence.Claim(ctx, sku, 0); err != nil {
			return false, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sku := range skus {
		if s.stock[sku] == 0 {
			return false, nil
		}
	}
	for _, sku := range skus {
		s.stock[sku]--
		s.sold[sku]++
	}
	return true, nil
}

func run(ctx context.Context, w io.Writer, o options) error {
	if o.Workers < 1 || o.Orders < 1 || o.SKUs < 2 || o.Stock < 0 {
		return errors.New("need -workers ≥ 1, -orders ≥ 1, -skus ≥ 2, -stock ≥ 0")
	}
	g, err := guard.New(memlock.New(), guard.Options{TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	s := &shop{stock: map[string]int{}, sold: map[string]int{}}
	skus := make([]string, o.SKUs)
	for i := range skus {
		skus[i] = fmt.Sprintf("sku:%d", i+1)
		s.stock[skus[i]] = o.Stock
	}
	fmt.Fprintf(w, "%d workers, %d orders each, of 2 or 3 of %d SKUs named in random order, %d units each\n",
		o.Workers, o.Orders, o.SKUs, o.Stock)

	start := time.Now()
	var mu sync.Mutex
	placed, refused, ordered := 0, 0, 0 // ordered: units of the placed orders
	var firstErr error
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			for range o.Orders {
				n := min(2+rand.IntN(2), o.SKUs)
				order := make([]string, n)
				for i, j := range rand.Perm(o.SKUs)[:n] {
					order[i] = skus[j]
				}
				var took bool
				// A deadlock would show as an order that never ends: bound
				// each one.
				octx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := g.DoAll(octx, order, func(ctx context.Context, _ map[string]token.Token) error {
					var err error
					took, err = s.take(ctx, order)
					return err
				})
				cancel()
				mu.Lock()
				switch {
				case err != nil && firstErr == nil:
					firstErr = fmt.Errorf("order %q: %w", order, err)
				case took:
					placed++
					ordered += n
				case err == nil:
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	fmt.Fprintf(w, "%d orders placed, %d refused for stock, in %v\n", placed, refused, time.Since(start).Round(time.Millisecond))

	// Every unit sold left the stock, and a refused order left nothing.
	slices.Sort(skus)
	units := 0
	for _, sku := range skus {
		fmt.Fprintf(w, "  %s: %3d sold, %3d left\n", sku, s.sold[sku], s.stock[sku])
		if s.sold[sku]+s.stock[sku] != o.Stock || s.stock[sku] < 0 {
			return fmt.Errorf("%s: %d sold and %d left of %d", sku, s.sold[sku], s.stock[sku], o.Stock)
		}
		units += s.sold[sku]
	}
	if placed+refused != o.Workers*o.Orders {
		return fmt.Errorf("%d orders ended of %d", placed+refused, o.Workers*o.Orders)
	}
	if units != ordered {
		return fmt.Errorf("%d units sold, but the placed orders hold %d: an order took some of its SKUs only", units, ordered)
	}
	fmt.Fprintf(w, "%d units in %d orders: every order took all of its SKUs or none, and none deadlocked\n", units, placed)
	return nil
}
