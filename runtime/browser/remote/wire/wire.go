// Package wire is the small protocol between session pods, which ask for
// browsers, and the operator, which runs them in browser pods. It holds names,
// labels and keys only and imports nothing, so the operator can share it
// without linking the browser driver.
//
// The protocol (docs/cluster.md, "Browser pods"):
//
//   - A session asks for a browser by creating (or renewing) a
//     coordination.k8s.io Lease named Name(...) in its namespace, labelled
//     with the agent and the browser name, and renews spec.renewTime while
//     it keeps the browser open. A profile's Lease carries AnnotationProfile;
//     an ephemeral (per-dialog) browser's carries AnnotationDialog and says in
//     spec.leaseDurationSeconds how long it may stay idle.
//   - The operator runs one browser pod per Lease that is not idle, and
//     publishes its address and per-pod token in the agent's Secret
//     EndpointsSecret(agent) under URLKey(name) and TokenKey(name), or why it
//     cannot run under ErrorKey(name).
//   - A Lease not renewed within the idle timeout (the BrowserProfile's
//     spec.idleTimeout, or the Lease's own duration) gets its pod deleted;
//     deleting an ephemeral browser's Lease ends its pod at once.
package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// Labels and annotations of browser objects.
const (
	// LabelName and LabelComponent are the Kubernetes recommended labels;
	// browser objects carry LabelName "picobot" and LabelComponent
	// ComponentBrowser.
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
	// LabelAgent names the agent that asks for a browser (the same key as
	// the API's LabelAgent).
	LabelAgent = "agents.picobot.io/agent"
	// LabelBrowser holds the browser name (Name) on its Lease, pod, Secret
	// and NetworkPolicy.
	LabelBrowser = "agents.picobot.io/browser"
	// AnnotationProfile on a Lease names the BrowserProfile it asks for.
	AnnotationProfile = "agents.picobot.io/browser-profile"
	// AnnotationDialog on a Lease names the dialog owning an ephemeral browser.
	AnnotationDialog = "agents.picobot.io/browser-dialog"

	// NameValue is LabelName's value on PicoBot objects.
	NameValue = "picobot"
	// ComponentBrowser is LabelComponent's value on browser objects.
	ComponentBrowser = "browser"
	// ComponentSession is LabelComponent's value on session pods.
	ComponentSession = "session"
)

// The browser pod's process (`picobot browser`).
const (
	// DefaultPort serves the authenticated DevTools endpoint.
	DefaultPort = 9222
	// EnvToken holds the per-pod token clients must send as
	// "Authorization: Bearer <token>".
	EnvToken = "PICOBOT_BROWSER_TOKEN"
	// EnvRestoreURL is a presigned GET of the profile archive, fetched and
	// unpacked into the user data folder before Chromium starts (a 404 means
	// a new profile). Set only for profiles stored in S3.
	EnvRestoreURL = "PICOBOT_BROWSER_RESTORE_URL"
	// EnvSaveURL is a presigned PUT the profile archive is uploaded to after
	// Chromium has exited. Set only for profiles stored in S3.
	EnvSaveURL = "PICOBOT_BROWSER_SAVE_URL"
	// EnvNoSandbox ("true") asks `picobot browser` to start Chromium with
	// --no-sandbox: in a browser pod (non-root, seccomp RuntimeDefault, no
	// capabilities) Chromium's own sandbox cannot create its namespaces, and
	// the pod is the sandbox.
	EnvNoSandbox = "PICOBOT_BROWSER_NO_SANDBOX"
	// WorkDir is the browser pod's working folder (the profile volume);
	// UserDataDir, relative to it, is the Chrome profile folder.
	WorkDir     = "/browser"
	UserDataDir = "chrome"
)

// Keys of the browser pod's own Secret (read only by the kubelet for the pod).
const (
	SecretKeyToken      = "token"
	SecretKeyRestoreURL = "restore-url"
	SecretKeySaveURL    = "save-url"
)

// maxBase keeps a browser name short enough for a pod name with a generated
// suffix to stay a valid host name (63 characters) and a label value.
const maxBase = 57

// ProfileName is the browser name of a BrowserProfile: "browser-<profile>",
// or a shortened, hashed form for long names and names that would pass for
// an ephemeral browser's.
func ProfileName(profile string) string {
	base := "browser-" + profile
	if len(base) <= maxBase && !strings.HasPrefix(profile, "eph-") {
		return base
	}
	head := strings.TrimRight(profile[:min(len(profile), 34)], "-.")
	return "browser-x-" + head + "-" + hash(profile)[:12]
}

// DialogName is the browser name of a dialog's ephemeral browser.
func DialogName(agent, dialog string) string {
	return "browser-eph-" + hash(agent + "\x00" + dialog)[:20]
}

// EndpointsSecret is the Secret in which the operator publishes an agent's
// browser addresses and tokens; only that agent's session pods may read it.
func EndpointsSecret(agent string) string {
	name := "picobot-browsers-" + agent
	if len(name) > 253 {
		name = name[:240] + "-" + hash(agent)[:12]
	}
	return name
}

// URLKey holds the browser's DevTools proxy address (http://host:port).
func URLKey(name string) string { return name + ".url" }

// TokenKey holds the browser pod's token.
func TokenKey(name string) string { return name + ".token" }

// ErrorKey holds why the browser cannot run, for the session to report,
// as FormatError writes it.
func ErrorKey(name string) string { return name + ".error" }

// FormatError stamps an error with the Lease renewal it answers, so a
// session ignores errors about its earlier requests.
func FormatError(renewed time.Time, msg string) string {
	return renewed.UTC().Format(time.RFC3339Nano) + " " + msg
}

// ParseError splits a FormatError value; an unstamped value has a zero time.
func ParseError(v string) (renewed time.Time, msg string) {
	stamp, rest, ok := strings.Cut(v, " ")
	if t, err := time.Parse(time.RFC3339Nano, stamp); ok && err == nil {
		return t, rest
	}
	return time.Time{}, v
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
