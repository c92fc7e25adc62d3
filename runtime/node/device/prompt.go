package device

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Prompter asks the device's user a yes/no question.
type Prompter interface {
	// Ask returns the answer, or ctx's error when none came in time.
	Ask(ctx context.Context, question string) (bool, error)
}

// Terminal asks on the node's terminal: the question is written to Out and
// a line is read from In ("y" or "yes" approves, anything else denies).
// Questions are asked one at a time.
type Terminal struct {
	Out io.Writer

	mu    sync.Mutex
	lines chan string
}

// NewTerminal returns a prompter on in and out; one goroutine reads in for
// the life of the process (a read of a terminal cannot be cancelled).
func NewTerminal(in io.Reader, out io.Writer) *Terminal {
	t := &Terminal{Out: out, lines: make(chan string)}
	go func() {
		defer close(t.lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			t.lines <- sc.Text()
		}
	}()
	return t
}

// Ask implements Prompter.
func (t *Terminal) Ask(ctx context.Context, question string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// A line typed while nobody asked answers nothing.
	for drained := false; !drained; {
		select {
		case <-t.lines:
		default:
			drained = true
		}
	}
	if _, err := fmt.Fprint(t.Out, question); err != nil {
		return false, err
	}
	select {
	case line, ok := <-t.lines:
		if !ok {
			return false, errors.New("the terminal closed")
		}
		a := strings.ToLower(strings.TrimSpace(line))
		return a == "y" || a == "yes", nil
	case <-ctx.Done():
		_, _ = fmt.Fprintln(t.Out, "\n(no answer: denied)")
		return false, ctx.Err()
	}
}

// Allowlist is a file of commands a node runs without asking its user, one
// a line: the command's words separated by spaces, each matched against
// the argument at its place with shell-style globs (filepath.Match); a last
// word "**" matches any further arguments. "#" starts a comment line.
//
//	echo **          echo with any arguments
//	uname -a         exactly uname -a
//	ls /tmp/*        ls of one entry of /tmp
func (n *Node) allowed(argv []string) (bool, error) {
	if n.cfg.Allowlist == "" {
		return false, nil
	}
	b, err := os.ReadFile(n.cfg.Allowlist)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to read the allowlist %q: %w", n.cfg.Allowlist, err)
	}
	for line := range strings.Lines(string(b)) {
		words := strings.Fields(line)
		if len(words) == 0 || strings.HasPrefix(words[0], "#") {
			continue
		}
		if matchWords(words, argv) {
			return true, nil
		}
	}
	return false, nil
}

func matchWords(pattern, argv []string) bool {
	for i, w := range pattern {
		if w == "**" && i == len(pattern)-1 {
			return true
		}
		if i >= len(argv) {
			return false
		}
		if ok, err := filepath.Match(w, argv[i]); err != nil || !ok {
			return false
		}
	}
	return len(argv) == len(pattern)
}
