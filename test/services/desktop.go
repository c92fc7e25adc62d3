package services

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// desktopTools installs (once) and returns the desktop programs `picobot
// node` uses on Linux: dbus-daemon, Xvfb and ffmpeg (hack/desktop.sh). It
// fails the test under CI and skips it elsewhere when they cannot be had.
func desktopTools(tb testing.TB) (dbusDaemon, xvfb, ffmpeg string) {
	tb.Helper()
	out, err := hackScript("desktop.sh")
	paths := strings.Fields(out)
	if err == nil && len(paths) != 3 {
		err = fmt.Errorf("hack/desktop.sh printed %q, not three paths", out)
	}
	if err != nil {
		reason, fatal := Unavailable("the desktop tools (dbus, xvfb, ffmpeg)", err)
		if fatal {
			tb.Fatal(reason)
		}
		tb.Skip(reason)
	}
	return paths[0], paths[1], paths[2]
}

// StartSessionBus starts a private D-Bus session bus (Debian's dbus-daemon)
// for the test and returns its address (what DBUS_SESSION_BUS_ADDRESS
// holds). It is stopped when the test ends.
func StartSessionBus(tb testing.TB) string {
	tb.Helper()
	daemon, _, _ := desktopTools(tb)
	sock := filepath.Join(shortTempDir(tb), "bus")
	cmd := exec.Command(daemon, "--session", "--nofork", "--nopidfile", "--print-address=1", "--address=unix:path="+sock)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("failed to start dbus-daemon: %v", err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			addr <- strings.TrimSpace(sc.Text())
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok || a == "" {
			tb.Fatal("dbus-daemon printed no address")
		}
		return a
	case <-time.After(30 * time.Second):
		tb.Fatal("dbus-daemon did not print its address within 30s")
	}
	return ""
}

// StartXvfb starts a virtual X display of width×height for the test and
// returns its DISPLAY (":<n>", a free number Xvfb picks). It is stopped
// when the test ends.
func StartXvfb(tb testing.TB, width, height int) string {
	tb.Helper()
	_, xvfb, _ := desktopTools(tb)
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(xvfb, "-displayfd", "3", "-screen", "0", fmt.Sprintf("%dx%dx24", width, height), "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("failed to start Xvfb: %v", err)
	}
	_ = w.Close()
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	num := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		if sc.Scan() {
			num <- strings.TrimSpace(sc.Text())
		}
		close(num)
		_ = r.Close()
	}()
	select {
	case n, ok := <-num:
		if !ok || n == "" {
			tb.Fatal("Xvfb printed no display number")
		}
		return ":" + n
	case <-time.After(30 * time.Second):
		tb.Fatal("Xvfb did not start within 30s")
	}
	return ""
}

// shortTempDir is a temporary folder with a short path (a unix socket's
// path is limited to about 100 bytes, which t.TempDir can exceed).
func shortTempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "pb-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
