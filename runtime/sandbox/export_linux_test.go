//go:build linux

package sandbox

// CommandNS is command, for the external tests: Command with the
// namespaces chosen.
var CommandNS = command

// DefaultPath is defaultPath.
const DefaultPath = defaultPath
