package v1alpha1

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a Go duration string ("90s", "10m", "1h30m"), as
// metav1.Duration. The schema of every Duration field refuses anything else
// at apply time. Unlike metav1.Duration it decodes whatever is stored all the same: an object
// written before the schema refused its value (an older chart) keeps that
// text in Invalid instead of failing the decode of the whole list, which
// would stop the operator's informer, and so every tenant's reconciling.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=32
type Duration struct {
	time.Duration `json:"-"`
	// Invalid is the stored text when it is not a Go duration.
	Invalid string `json:"-"`
}

// NewDuration returns d as a *Duration.
func NewDuration(d time.Duration) *Duration { return &Duration{Duration: d} }

// UnmarshalJSON accepts any JSON value; what is not a duration string is
// kept in Invalid.
func (d *Duration) UnmarshalJSON(b []byte) error {
	*d = Duration{}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		d.Invalid = string(b)
		return nil //nolint:nilerr // kept in Invalid: failing would fail the informer's whole list
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Invalid = s
		return nil //nolint:nilerr // kept in Invalid, as above
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration, or the invalid text as it was stored.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.Invalid != "" {
		return json.Marshal(d.Invalid)
	}
	return json.Marshal(d.String())
}

// ToUnstructured makes the unstructured converter write the same string.
func (d Duration) ToUnstructured() any {
	if d.Invalid != "" {
		return d.Invalid
	}
	return d.String()
}

// Valid reports whether the stored value is a duration.
func (d *Duration) Valid() bool { return d == nil || d.Invalid == "" }

// invalidDurations lists "<path>: <text>" for each of the fields that holds a
// stored value that is not a duration, in the order given.
func invalidDurations(paths []string, fields []*Duration) []string {
	var out []string
	for i, d := range fields {
		if !d.Valid() {
			out = append(out, fmt.Sprintf("%s: %q is not a duration", paths[i], d.Invalid))
		}
	}
	return out
}

// InvalidFields lists the Agent's stored fields that the schema refuses.
func (a *Agent) InvalidFields() []string {
	var paths []string
	var fields []*Duration
	if r := a.Spec.Runtime; r != nil {
		paths, fields = append(paths, "spec.runtime.idleTimeout"), append(fields, r.IdleTimeout)
	}
	for i, s := range a.Spec.MCPServers {
		paths, fields = append(paths, fmt.Sprintf("spec.mcpServers[%d].timeout", i)), append(fields, s.Timeout)
	}
	return invalidDurations(paths, fields)
}

// InvalidFields lists the CronJob's stored fields that the schema refuses.
func (c *CronJob) InvalidFields() []string {
	return invalidDurations([]string{"spec.catchUpWindow"}, []*Duration{c.Spec.CatchUpWindow})
}

// InvalidFields lists the BrowserProfile's stored fields that the schema
// refuses.
func (b *BrowserProfile) InvalidFields() []string {
	return invalidDurations([]string{"spec.idleTimeout"}, []*Duration{b.Spec.IdleTimeout})
}
