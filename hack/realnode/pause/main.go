// Command pause is the sandbox process of the pods of the real node
// (hack/realnode.sh): it holds a pod's namespaces and does nothing else. It
// sleeps until SIGINT or SIGTERM, and reaps the zombies it inherits as the
// pod's PID 1 when the pod shares its process namespace. A static Go binary,
// so the image needs no C toolchain and no base image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child; one SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
