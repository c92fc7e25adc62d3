package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/remote"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// browserCmd is `picobot browser`: the process of a browser pod. It launches
// headless Chromium (every request through the egress policy) and serves its
// DevTools endpoint behind a token. A profile stored in S3 is restored
// before Chromium starts and saved after it exits (presigned URLs from the
// operator, in the environment).
func browserCmd(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runBrowser(ctx, args, os.Getenv, os.Stderr)
}

func runBrowser(ctx context.Context, args []string, env func(string) string, out io.Writer) error {
	fs := newFlags("browser", `Usage: picobot browser --user-data-dir DIR [flags]

Runs headless Chromium behind an authenticating DevTools proxy (the process of a browser pod).
`)
	listen := fs.String("listen", ":9222", "Address of the authenticated DevTools endpoint.")
	dataDir := fs.String("user-data-dir", "", "Chrome profile folder (required).")
	bin := fs.String("chromium", browser.DefaultBin, "Chromium executable.")
	tokenFile := fs.String("token-file", "", "File holding the token clients must send as 'Authorization: Bearer' (default: $PICOBOT_BROWSER_TOKEN).")
	domains := fs.String("allowed-domains", "", "Comma-separated domains the browser may load (default: any public host).")
	if err := parseFlags(fs, args, os.Stdout, out); err != nil {
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
	noSandbox, err := envBool(env, wire.EnvNoSandbox)
	if err != nil {
		return err
	}
	restoreURL, saveURL := strings.TrimSpace(env(wire.EnvRestoreURL)), strings.TrimSpace(env(wire.EnvSaveURL))
	if restoreURL != "" {
		// Before Chromium starts: it would otherwise create a new profile
		// in the folder and the restored one would overwrite a live one.
		restored, err := remote.RestoreProfile(ctx, profileHTTP, restoreURL, *dataDir)
		if err != nil {
			return fmt.Errorf("failed to restore the browser profile: %w", err)
		}
		log.Info("Browser profile", "restored", restored)
	}
	pod, err := browser.StartPod(ctx, browser.PodConfig{Bin: *bin, UserDataDir: *dataDir, Token: token, Domains: allowed,
		NoSandbox: noSandbox, Log: log})
	if err != nil {
		return err
	}
	serveErr := serveBrowser(ctx, pod, *listen, log)
	pod.Close()
	if saveURL == "" {
		return serveErr
	}
	// After Chromium has exited, so the profile on disk is complete. The
	// pod's termination grace period (60s) bounds this; a context of its
	// own, as ctx is already cancelled when the pod is being stopped.
	save, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	if err := remote.SaveProfile(save, profileHTTP, saveURL, *dataDir); err != nil {
		return errors.Join(serveErr, fmt.Errorf("failed to save the browser profile: %w", err))
	}
	log.Info("Browser profile saved")
	return serveErr
}

// profileHTTP moves profile archives to and from presigned S3 URLs.
var profileHTTP = &http.Client{Timeout: 2 * time.Minute}

// serveBrowser serves the pod's DevTools endpoint on listen until ctx ends
// (nil) or Chromium exits (an error).
func serveBrowser(ctx context.Context, pod *browser.Pod, listen string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", listen, err)
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

// envBool reads a boolean environment variable ("" is false).
func envBool(env func(string) string, name string) (bool, error) {
	v := strings.TrimSpace(env(name))
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s must be true or false, not %q", name, v)
	}
	return b, nil
}
