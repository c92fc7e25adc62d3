// Package crd embeds the CustomResourceDefinitions that `make manifests`
// generates into bases/, so that code validating PicoBot objects without an API
// server (embedded mode) always uses the same schemas, defaults and CEL rules as
// the cluster: regenerating the YAML updates the validator with no hand copy to
// keep in sync.
package crd

import "embed"

// FS holds bases/*.yaml, one CustomResourceDefinition per file.
//
//go:embed bases/*.yaml
var FS embed.FS
