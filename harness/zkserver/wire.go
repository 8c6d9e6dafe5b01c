package zkserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// fourLetter sends a four-letter word and returns the reply. (zk.FLWSrvr
// does not parse the version line of Debian's ZooKeeper 3.8.)
func fourLetter(ctx context.Context, addr, cmd string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(conn, 1<<20))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return string(b), err
	}
	if strings.Contains(string(b), "not in the whitelist") {
		return "", fmt.Errorf("zkserver: %s: %s", addr, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// mode returns what srvr reports as the server's mode: "standalone",
// "leader" or "follower" (or "observer"). A server without a quorum, or
// still starting, answers srvr without a Mode line: that is an error.
func mode(ctx context.Context, addr string) (string, error) {
	out, err := fourLetter(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("zkserver: %s is not serving: srvr says %q", addr, strings.TrimSpace(out))
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// withConn runs fn on a fresh session that is closed afterwards; when ctx
// ends first the session is closed, which ends fn's pending calls.
func withConn(ctx context.Context, addrs []string, fn func(*zk.Conn) error) error {
	c, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn(c) }()
	select {
	case err = <-done:
		c.Close()
	case <-ctx.Done():
		c.Close()
		<-done
		err = ctx.Err()
	}
	return err
}

// createAll creates p and its missing parents.
func createAll(c *zk.Conn, p string) error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + part
		if _, err := c.Create(cur, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// deleteAll deletes p and everything below it.
func deleteAll(c *zk.Conn, p string) error {
	kids, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("children of %s: %w", p, err)
	}
	for _, k := range kids {
		if err := deleteAll(c, path.Join(p, k)); err != nil {
			return err
		}
	}
	if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return nil
}
