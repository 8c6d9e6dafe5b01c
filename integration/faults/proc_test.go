package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenceguard/fenceguard/locks"
)

// clientEnv carries a client process's configuration (JSON): the test
// binary, started with it set, runs as a client (see TestMain).
const clientEnv = "FENCEGUARD_FAULTS_CLIENT"

// clientMain is a client process: commands from stdin, events to stdout, one
// JSON line each, logs to stderr. It returns the exit code.
func clientMain(js string) int {
	var cfg clientConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "client: bad configuration:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("client", cfg.ID)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout) // one Write per event: a process frozen after an event has sent it
	emit := func(e event) {
		e.Client = cfg.ID
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(e)
	}
	c, err := newClient(ctx, cfg, nil, emit, log)
	if err != nil {
		emit(event{Kind: evFailed, Time: time.Now(), Err: err.Error()})
		return 1
	}
	emit(event{Kind: evReady, Time: time.Now()})
	cmds := make(chan command)
	go func() { // ends with stdin, which the orchestrator closes last
		defer close(cmds)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			var cmd command
			if json.Unmarshal(sc.Bytes(), &cmd) == nil {
				cmds <- cmd
			}
		}
	}()
loop:
	for {
		select {
		case cmd, ok := <-cmds:
			if !ok || cmd.Kind == cmdQuit {
				break loop
			}
			c.handle(ctx, cmd)
		case <-ctx.Done():
			break loop
		}
	}
	stop() // a gated critical section gives up
	c.close()
	return 0
}

// clientProc is one client as the orchestrator sees it: a process, or — for
// memlock, whose lock service is the process's own memory — a client in the
// test process.
type clientProc struct {
	id     int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	waited chan struct{} // closed once the process has been waited for
	err    error         // how it exited; set before waited is closed

	mem       *client // in-process
	memCancel context.CancelFunc

	mu sync.Mutex // serializes writes to stdin
}

// startProc starts a client process. Its events go to events until quit is
// closed; wg counts its reader goroutine.
func startProc(cfg clientConfig, events chan<- event, quit <-chan struct{}, wg *sync.WaitGroup) (*clientProc, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientEnv+"="+string(js))
	cmd.SysProcAttr = sysProcAttr()
	p := &clientProc{id: cfg.ID, cmd: cmd, stderr: &tailBuffer{max: 64 << 10}, waited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		send := func(e event) {
			select {
			case events <- e:
			case <-quit:
			}
		}
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Kind == "" {
				continue // not an event: a stray line, the race detector's report goes to stderr
			}
			e.Client = cfg.ID // the orchestrator's numbering, not the line's
			send(e)
		}
		io.Copy(io.Discard, stdout)
		p.err = cmd.Wait()
		close(p.waited)
		send(event{Client: cfg.ID, Kind: evExited, Time: time.Now(), Err: fmt.Sprint(p.err)})
	}()
	return p, nil
}

// startMem starts an in-process client over the shared locker l.
func startMem(cfg clientConfig, l locks.Locker, events chan<- event, quit <-chan struct{}) (*clientProc, error) {
	ctx, cancel := context.WithCancel(context.Background())
	emit := func(e event) {
		e.Client = cfg.ID
		select {
		case events <- e:
		case <-quit:
		}
	}
	c, err := newClient(ctx, cfg, l, emit, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		return nil, err
	}
	go emit(event{Kind: evReady, Time: time.Now()})
	return &clientProc{id: cfg.ID, mem: c, memCancel: cancel}, nil
}

// pid is the client's process id, 0 for an in-process client.
func (p *clientProc) pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *clientProc) send(ctx context.Context, cmd command) error {
	if p.mem != nil {
		p.mem.handle(ctx, cmd)
		return nil
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err = p.stdin.Write(append(b, '\n'))
	return err
}

// signal sends sig to the client process.
func (p *clientProc) signal(sig syscall.Signal) error {
	if p.cmd == nil {
		return errors.New("an in-process client cannot be signalled")
	}
	return kill(p.cmd.Process.Pid, sig)
}

// stop ends the client: it is resumed (it may be frozen), asked to quit,
// and killed if it has not exited within a few seconds. It returns how the
// process exited and its last standard error when that went wrong.
func (p *clientProc) stop() error {
	if p.mem != nil {
		p.memCancel()
		p.mem.close()
		return nil
	}
	p.signal(sigCont)
	p.send(context.Background(), command{Kind: cmdQuit})
	p.mu.Lock()
	p.stdin.Close()
	p.mu.Unlock()
	select {
	case <-p.waited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.waited
		return fmt.Errorf("client c%d (pid %d) did not quit within 10s: killed", p.id, p.pid())
	}
	if p.err != nil || p.stderr.raced() {
		return fmt.Errorf("client c%d (pid %d) exited: %v\n%s", p.id, p.pid(), p.err, p.stderr)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it, and remembers whether
// the race detector reported anything. It is safe for concurrent use.
type tailBuffer struct {
	max  int
	mu   sync.Mutex
	b    []byte // guarded by mu
	race bool   // guarded by mu
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.race = t.race || strings.Contains(string(p), "DATA RACE")
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) raced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.race
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimRight(string(t.b), "\n")
	if t.race && !strings.Contains(s, "DATA RACE") {
		s = "(the race detector reported a data race; its report scrolled out)\n" + s
	}
	return s
}
