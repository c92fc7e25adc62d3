// Command netcheck is the probe of the real node's NetworkPolicy e2e
// (test/e2e/realnode): a pod runs `netcheck sleep`, and the test runs the
// checks with kubectl exec, so every connection starts from the pod's own
// address, where the policy engine judges it. The picobot image has no shell
// and nothing that dials an arbitrary address, by design; this static binary
// is its own image (hack/realnode-images.sh netcheck).
//
//	netcheck sleep [PORT]     # PID 1 of the probe pod, until SIGTERM; with PORT
//	                          # it also accepts (and closes) TCP connections there
//	netcheck tcp HOST:PORT    # exit 0 when a TCP connection opens within 3 s
//	netcheck dns NAME         # exit 0 when the pod's resolver answers NAME within 3 s
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// timeout bounds one check: a dropped packet is never answered, so a check
// that has not connected by then is refused.
const timeout = 3 * time.Second

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "netcheck:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: netcheck sleep | tcp HOST:PORT | dns NAME")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch {
	case args[0] == "sleep" && len(args) <= 2:
		if len(args) == 2 {
			l, err := net.Listen("tcp", ":"+args[1])
			if err != nil {
				return fmt.Errorf("failed to listen on port %s: %w", args[1], err)
			}
			go accept(l)
		}
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
		<-signals
		return nil
	case args[0] == "tcp" && len(args) == 2:
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", args[1])
		if err != nil {
			return fmt.Errorf("failed to connect to %q: %w", args[1], err)
		}
		fmt.Printf("connected to %s from %s\n", c.RemoteAddr(), c.LocalAddr())
		return c.Close()
	case args[0] == "dns" && len(args) == 2:
		addrs, err := net.DefaultResolver.LookupHost(ctx, args[1])
		if err != nil {
			return fmt.Errorf("failed to resolve %q: %w", args[1], err)
		}
		fmt.Println(addrs)
		return nil
	}
	return fmt.Errorf("unknown check %q (want sleep [PORT], tcp HOST:PORT or dns NAME)", args)
}

// accept closes every connection it takes: the checks only open them.
func accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}
