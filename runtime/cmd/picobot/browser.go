package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/browser"
)

// browserCmd is `picobot browser`: the process of a browser pod. It launches
// headless Chromium (every request through the egress policy) and serves its
// DevTools endpoint behind a token.
func browserCmd(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runBrowser(ctx, args, os.Getenv, os.Stderr)
}

func runBrowser(ctx context.Context, args []string, env func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("browser", flag.ContinueOnError)
	fs.SetOutput(out)
	listen := fs.String("listen", ":9222", "Address of the authenticated DevTools endpoint.")
	dataDir := fs.String("user-data-dir", "", "Chrome profile folder (required).")
	bin := fs.String("chromium", browser.DefaultBin, "Chromium executable.")
	tokenFile := fs.String("token-file", "", "File holding the token clients must send as 'Authorization: Bearer' (default: $PICOBOT_BROWSER_TOKEN).")
	domains := fs.String("allowed-domains", "", "Comma-separated domains the browser may load (default: any public host).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	token := strings.TrimSpace(env("PICOBOT_BROWSER_TOKEN"))
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("failed to read token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return errors.New("a token is required: set PICOBOT_BROWSER_TOKEN or --token-file")
	}
	if *dataDir == "" {
		return errors.New("--user-data-dir is required")
	}
	var allowed browser.Domains
	for _, d := range strings.Split(*domains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			allowed = append(allowed, d)
		}
	}
	log := slog.New(slog.NewTextHandler(out, nil))
	pod, err := browser.StartPod(ctx, browser.PodConfig{Bin: *bin, UserDataDir: *dataDir, Token: token, Domains: allowed, Log: log})
	if err != nil {
		return err
	}
	defer pod.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: pod.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info("Browser serving DevTools", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case <-pod.Done():
		_ = srv.Close()
		return errors.New("chromium exited")
	case err := <-errc:
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}
