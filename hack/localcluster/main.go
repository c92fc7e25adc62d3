// Command localcluster runs a throwaway kube-apiserver + etcd with the PicoBot
// CRDs installed, writes a kubeconfig, and stops everything on SIGINT/SIGTERM.
// `make run` uses it; so can anyone who wants a local cluster without Docker.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/picobot/picobot/test/controlplane"
)

func main() {
	kubeconfig := flag.String("write-kubeconfig", ".picobot/kubeconfig", "Where to write the kubeconfig.")
	flag.Parse()
	if err := run(*kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := controlplane.Start()
	if err != nil {
		return err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: failed to stop:", err)
		}
		_ = os.Remove(kubeconfig)
	}()
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return fmt.Errorf("failed to create kubeconfig folder: %w", err)
	}
	// Write then rename, so a watcher never reads half a file.
	if err := os.WriteFile(kubeconfig+".tmp", env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	if err := os.Rename(kubeconfig+".tmp", kubeconfig); err != nil {
		return fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	fmt.Fprintf(os.Stderr, "localcluster: API server at %s, kubeconfig %s\n", env.Config.Host, kubeconfig)
	<-ctx.Done()
	return nil
}
