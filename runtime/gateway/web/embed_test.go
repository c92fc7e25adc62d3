package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
)

func TestFSHoldsTheUI(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "ui-core.js", "nodes.js", "style.css", "vendor/highlight/highlight.min.js", "vendor/highlight/github.css", "vendor/highlight/github-dark.css",
		"canvas.js", "canvas.css", "canvas-frame.html"} {
		b, err := fs.ReadFile(FS, name)
		if err != nil {
			t.Fatalf("embedded UI lacks %s: %v", name, err)
		}
		if len(b) == 0 {
			t.Errorf("%s is empty", name)
		}
	}
	index, _ := fs.ReadFile(FS, "index.html")
	for _, ref := range []string{`src="ui-core.js"`, `src="app.js"`, `src="nodes.js"`, `href="style.css"`, `src="vendor/highlight/highlight.min.js"`, `href="vendor/highlight/github.css"`,
		`src="canvas.js"`, `href="canvas.css"`, `sandbox="allow-scripts"`} {
		if !strings.Contains(string(index), ref) {
			t.Errorf("index.html does not reference %s", ref)
		}
	}
}

func TestFileServerServesIndex(t *testing.T) {
	srv := httptest.NewServer(http.FileServerFS(FS))
	defer srv.Close()
	for path, ctype := range map[string]string{"/": "text/html", "/app.js": "javascript", "/ui-core.js": "javascript", "/style.css": "text/css"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %q, want 200 %s", path, res.StatusCode, res.Header.Get("Content-Type"), ctype)
		}
	}
}

// TestJavaScript runs the UI's unit tests (app.test.mjs) with Node's built-in
// runner when Node is installed.
func TestJavaScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	for _, f := range []string{"app.js", "ui-core.js", "canvas.js"} {
		if out, err := exec.Command(node, "--check", f).CombinedOutput(); err != nil {
			t.Fatalf("node --check %s: %v\n%s", f, err, out)
		}
	}
	out, err := exec.Command(node, "--test", "--test-reporter=dot", "app.test.mjs").CombinedOutput()
	if err != nil {
		t.Fatalf("node --test app.test.mjs: %v\n%s", err, out)
	}
}
