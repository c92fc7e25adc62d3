package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// errFlagParse marks a flag error the flag package already reported, with
// the command's usage, on stderr: the exit code is 2.
var errFlagParse = errors.New("invalid flags")

// newFlags returns the flag set of `picobot <name>`, whose usage starts
// with synopsis (the command line and what the command does).
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), synopsis)
		if hasFlags(fs) {
			_, _ = fmt.Fprint(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	found := false
	fs.VisitAll(func(*flag.Flag) { found = true })
	return found
}

// parseFlags parses args into fs as every command does: -h, -help and
// --help print the usage on stdout and return flag.ErrHelp (exit 0, as
// asked); a bad flag prints what is wrong and the usage on stderr and
// returns errFlagParse (exit 2).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var said bytes.Buffer
	fs.SetOutput(&said)
	err := fs.Parse(args)
	fs.SetOutput(stderr) // what the command prints with fs.Usage later is an error's
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		_, _ = stdout.Write(said.Bytes())
		return flag.ErrHelp
	default:
		_, _ = stderr.Write(said.Bytes())
		return errFlagParse
	}
}

// parse is parseFlags on the process's own stdout and stderr.
func parse(fs *flag.FlagSet, args []string) error {
	return parseFlags(fs, args, os.Stdout, os.Stderr)
}
