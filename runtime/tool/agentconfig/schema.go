package agentconfig

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	crdfs "github.com/picobot/picobot/config/crd"
)

// agentCRD is the file of the Agent CRD in crdfs.FS.
const agentCRD = "bases/agents.picobot.io_agents.yaml"

// specSchema is the openAPIV3Schema of the Agent's spec, read once from the
// CRD the binary embeds (the one `make manifests` generated, which the
// chart installs and embedded mode validates with).
var specSchema = sync.OnceValues(func() (*apiextensionsv1.JSONSchemaProps, error) {
	data, err := fs.ReadFile(crdfs.FS, agentCRD)
	if err != nil {
		return nil, fmt.Errorf("failed to read the Agent CRD: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return nil, fmt.Errorf("failed to decode the Agent CRD: %w", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Storage && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			if spec, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]; ok {
				return &spec, nil
			}
		}
	}
	return nil, fmt.Errorf("the Agent CRD has no spec schema")
})

// SchemaOf returns the schema of the Agent's spec at path (dot-separated
// field names under spec, "" for spec itself), compacted for a model:
// descriptions cut to their first sentence. At the top (path "") only the
// fields with their type and description are listed, since the whole tree
// is tens of kilobytes; a path gives that field's whole subtree.
func SchemaOf(path string) (string, error) {
	s, err := specSchema()
	if err != nil {
		return "", err
	}
	if path = strings.Trim(strings.TrimPrefix(strings.TrimSpace(path), "spec"), "."); path != "" {
		for _, name := range strings.Split(path, ".") {
			next, ok := child(s, name)
			if !ok {
				return "", fmt.Errorf("spec has no field %q at %q; fields there: %s", name, path, strings.Join(fieldNames(s), ", "))
			}
			s = next
		}
		b, err := json.Marshal(compact(*s))
		return string(b), err
	}
	top := map[string]string{}
	for name, p := range s.Properties {
		top[name] = p.Type + ": " + firstSentence(p.Description)
	}
	b, err := json.Marshal(map[string]any{"fields": top, "required": s.Required,
		"more": "call config.schema with path (e.g. tools.exec) for a field's full schema"})
	return string(b), err
}

// child is a field of an object schema, or of its items (a list) or values
// (a map).
func child(s *apiextensionsv1.JSONSchemaProps, name string) (*apiextensionsv1.JSONSchemaProps, bool) {
	for {
		if p, ok := s.Properties[name]; ok {
			return &p, true
		}
		switch {
		case s.Items != nil && s.Items.Schema != nil:
			s = s.Items.Schema
		case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			s = s.AdditionalProperties.Schema
		default:
			return nil, false
		}
	}
}

func fieldNames(s *apiextensionsv1.JSONSchemaProps) []string {
	if s.Items != nil && s.Items.Schema != nil {
		s = s.Items.Schema
	}
	var out []string
	for name := range s.Properties {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// compact shortens the descriptions of a schema tree.
func compact(s apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	s.Description = firstSentence(s.Description)
	if len(s.Properties) > 0 {
		props := make(map[string]apiextensionsv1.JSONSchemaProps, len(s.Properties))
		for k, v := range s.Properties {
			props[k] = compact(v)
		}
		s.Properties = props
	}
	if s.Items != nil && s.Items.Schema != nil {
		item := compact(*s.Items.Schema)
		s.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &item}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		v := compact(*s.AdditionalProperties.Schema)
		s.AdditionalProperties = &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &v}
	}
	return s
}

func firstSentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}
