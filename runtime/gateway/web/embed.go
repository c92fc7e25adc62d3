// Package web holds the gateway's web UI, embedded in the binary.
//
// The UI is plain HTML, CSS and JavaScript with no build step and no external
// resources (highlight.js, which colours code blocks, is vendored under
// vendor/highlight): index.html loads ui-core.js (pure functions: markdown rendering,
// the turn/frame reducer, history grouping; unit-tested by app.test.mjs with
// `node --test`) and app.js (the DOM wiring); canvas.js, canvas.css and
// canvas-frame.html are the canvas panel (docs/canvas.md);
// nodes.js is the Devices section (paired nodes) of the configuration view. The element ids and
// classes that browser tests may rely on are listed at the top of app.js (and
// of canvas.js for the panel).
package web

import "embed"

// FS holds the UI's files at its root; the gateway serves it at "/".
//
//go:embed index.html app.js ui-core.js nodes.js style.css canvas.js canvas.css canvas-frame.html vendor/highlight/highlight.min.js vendor/highlight/github.css vendor/highlight/github-dark.css
var FS embed.FS
