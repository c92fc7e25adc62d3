// Command picobot-node is `picobot node` alone: the paired-device client
// without the rest of PicoBot, a small binary with a small footprint for
// the machines it runs on (docs/nodes.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/picobot/picobot/runtime/buildinfo"
	"github.com/picobot/picobot/runtime/node/device"
)

func main() {
	err := device.Command(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, buildinfo.Read().Version)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "picobot-node:", err)
		os.Exit(1)
	}
}
