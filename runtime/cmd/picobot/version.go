package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/picobot/picobot/runtime/buildinfo"
	"github.com/picobot/picobot/runtime/client"
)

// versionCmd is `picobot version`: this build, and the gateway's when one
// answers (the one of --url or $PICOBOT_URL; a gateway named on the command
// line that does not answer is a failure, the default one is just skipped).
func versionCmd(args []string, stdout io.Writer) error {
	fs := newFlags("version", `Usage: picobot version [flags]

Prints this build's version, VCS revision and Go version, and the gateway's when one answers.
`)
	asJSON := fs.Bool("json", false, "Print JSON: {\"client\": {...}, \"gateway\": {...}}.")
	gatewayURL := fs.String("url", "", "Gateway to ask for its version ($PICOBOT_URL, else "+defaultGatewayURL+" if it answers).")
	apiKey := fs.String("api-key", os.Getenv("PICOBOT_API_KEY"), "API key ($PICOBOT_API_KEY).")
	if err := parseFlags(fs, args, stdout, os.Stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := *gatewayURL != "" || os.Getenv("PICOBOT_URL") != ""
	target := *gatewayURL
	if target == "" {
		target = os.Getenv("PICOBOT_URL")
	}
	if target == "" {
		target = defaultGatewayURL
	}
	out := struct {
		Client  buildinfo.Info  `json:"client"`
		Gateway *buildinfo.Info `json:"gateway,omitempty"`
		URL     string          `json:"url,omitempty"`
	}{Client: buildinfo.Read()}
	gw, err := gatewayVersion(target, *apiKey)
	switch {
	case err == nil:
		out.Gateway, out.URL = &gw, target
	case explicit:
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	_, _ = fmt.Fprintf(stdout, "picobot %s\n", out.Client)
	if out.Gateway != nil {
		_, _ = fmt.Fprintf(stdout, "gateway %s: %s\n", out.URL, out.Gateway)
	}
	return nil
}

func gatewayVersion(url, apiKey string) (buildinfo.Info, error) {
	c, err := client.New(url, client.Options{APIKey: apiKey})
	if err != nil {
		return buildinfo.Info{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return c.Version(ctx)
}
