package zkwire

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// FourLetter sends a four-letter word (srvr, ruok, envi, mntr, …) and
// returns the server's answer. The server must list it in
// 4lw.commands.whitelist; otherwise it answers "… is not executed because
// it is not in the whitelist." (returned as an error).
func FourLetter(ctx context.Context, addr, cmd string) (string, error) {
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
		if cerr := ctxErr(ctx); cerr != nil {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return string(b), err
	}
	if strings.Contains(string(b), "not in the whitelist") {
		return "", fmt.Errorf("zkwire: %s: %s", addr, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// Mode returns what srvr reports as the server's mode: "standalone",
// "leader" or "follower" (or "observer"). A server without a quorum, or
// still starting, answers srvr without a Mode line: that is an error.
func Mode(ctx context.Context, addr string) (string, error) {
	out, err := FourLetter(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("zkwire: %s is not serving: srvr says %q", addr, strings.TrimSpace(out))
}
