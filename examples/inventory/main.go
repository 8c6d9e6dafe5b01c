// Command inventory is fenceguard's example: a small inventory service whose
// stock is written by lock holders under fencing, and a demo that shows a
// paused lock holder overselling without fencing and being refused with it.
//
//	go run ./examples/inventory            the demo, with nothing to set up
//	inventory demo   [flags]               the same, with flags (-h lists them)
//	inventory serve  [flags]               the service alone
//	inventory worker [flags]               one lock-holding seller (the demo starts these)
//	inventory load   [flags]               serve under hostile load against PostgreSQL, fenced and not (docs/load.md)
//
// demo and serve run on PostgreSQL, MySQL or MariaDB (--database-url,
// --store) or in memory.
//
// This file only wires: flags, signals, logs, the HTTP server's lifetime.
// The service is internal/service, the seller internal/worker, the demo
// internal/demo, and the choice of lock service and store internal/backend.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/child"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/demo"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/load"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/worker"
	"github.com/fenceguard/fenceguard/token"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Started by the demo or a load run: end with it (see package child).
	ctx, cancel := child.WatchParent(ctx)
	defer cancel()

	cmd := "demo"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "demo":
		err = runDemo(ctx, args)
	case "serve":
		err = serve(ctx, stop, args)
	case "load":
		err = load.Main(ctx, args, selfCommand, os.Stdout)
	case "worker":
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		err = worker.Main(ctx, args, os.Stdin, os.Stdout, log)
	default:
		fmt.Fprintf(os.Stderr, "inventory: unknown command %q: want demo, serve, worker or load\n", cmd)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, "inventory:", err)
		return 1
	}
	return 0
}

func runDemo(ctx context.Context, args []string) error {
	var c demo.Config
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.IntVar(&c.Workers, "workers", 4, "worker processes")
	fs.IntVar(&c.Stock, "stock", 30, "units in stock at the start of each run")
	fs.DurationVar(&c.TTL, "ttl", 2*time.Second, "lease TTL")
	fs.DurationVar(&c.Work, "work", 100*time.Millisecond, "a worker's time between reading the stock and writing it")
	fs.DurationVar(&c.Pause, "pause", 3500*time.Millisecond, "how long the frozen worker stays frozen at least (longer than --ttl)")
	fs.StringVar(&c.Timeline, "timeline", "", "write an SVG timeline of both runs to this file")
	fs.StringVar(&c.Events, "events", "", "write every worker event of both runs to this file, as JSON lines")
	verbose := fs.Bool("v", false, "show the service's and the workers' logs")
	storeFlags(fs, &c.Store)
	c.Lock.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *verbose {
		c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
		c.WorkerLogs = os.Stderr
	}
	return demo.Main(ctx, c, os.Stdout)
}

func serve(ctx context.Context, stopSignals func(), args []string) error {
	var (
		sc       backend.StoreConfig
		unfenced bool
	)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "how long in-flight requests get to finish on shutdown")
	fs.BoolVar(&unfenced, "unfenced", false, "switch fencing off (a plain SELECT, then UPDATE): for demonstrations only")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the service to this file until it shuts down (for load runs; off by default)")
	storeFlags(fs, &sc)
	var lc backend.LockConfig
	lc.RegisterFlags(fs) // the holders' lock service, for the sequencer check
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	// With the holders' lock service named, fenced routes refuse tokens
	// above its current grant; without, only tokens far above the clock.
	var seq token.Sequencer
	lockNamed := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "lock", "etcd", "redis", "redlock", "zk":
			lockNamed = true
		}
	})
	if lockNamed {
		s, closeSeq, err := backend.OpenSequencer(ctx, lc, log)
		if err != nil {
			return err
		}
		defer closeSeq()
		seq = s
	} else {
		log.Warn("no lock service named (--lock and its endpoints): fenced routes refuse only tokens far above the clock; name the holders' lock service to refuse every token above its current grant")
	}

	store, err := backend.OpenStore(ctx, sc, log)
	if err != nil {
		return err
	}
	defer store.Close()
	if store.Notice != "" {
		log.Warn(strings.ReplaceAll(store.Notice, "\n", " "))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := service.New(service.Options{Store: store, Unfenced: unfenced, Registry: reg, Logger: log, Sequencer: seq})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              *addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      10 * time.Second, // per-item serialization must not wait on a slow client
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	setup := store.Fencing().Setup
	if unfenced {
		setup = "OFF"
	}
	log.Info("serving", "addr", *addr, "store", store.Desc, "fencing", setup)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Graceful: stop accepting, let every request in flight finish (each
	// sale is one statement, or one critical section in memory, so it is
	// applied whole or not at all), then close the store. A second signal
	// ends the process at once.
	stopSignals()
	log.Info("shutting down", "grace", *grace)
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Past the grace: close the connections, which cancels the
		// requests still running; a statement cancelled is rolled back.
		srv.Close()
		return fmt.Errorf("shutdown: requests still running after %v: %w", *grace, err)
	}
	return nil
}

// selfCommand runs this program again with args, in this environment.
func selfCommand(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, args...)
}

func storeFlags(fs *flag.FlagSet, sc *backend.StoreConfig) {
	fs.StringVar(&sc.URL, "database-url", os.Getenv("DATABASE_URL"),
		"PostgreSQL connection string, or mysql://user:password@host:port/database for MySQL or MariaDB (default $DATABASE_URL)")
	fs.StringVar(&sc.Mode, "store", backend.StoreAuto,
		"auto: the database URL, else a throwaway local PostgreSQL, else memory; postgres: no memory fallback; "+
			"mysql: a mysql:// URL or a go-sql-driver/mysql DSN, else a throwaway local MariaDB; memory")
}
