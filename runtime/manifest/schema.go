package manifest

import (
	"fmt"
	"io/fs"
	"path"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// kindSchema is what the API server builds for one served version of a CRD
// (customresource_handler.go getOrCreateServingInfoFor): the structural schema
// used for pruning, defaulting and CEL, the OpenAPI validator, and the compiled
// CEL rules.
type kindSchema struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator // nil when the schema has no x-kubernetes-validations
}

// loadSchemas reads every *.yaml file in crds as a CustomResourceDefinition and
// returns the schema of each served version, keyed by group/version/kind.
func loadSchemas(crds fs.FS) (map[schema.GroupVersionKind]*kindSchema, error) {
	out := map[schema.GroupVersionKind]*kindSchema{}
	err := fs.WalkDir(crds, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || (path.Ext(p) != ".yaml" && path.Ext(p) != ".yml") {
			return nil
		}
		data, err := fs.ReadFile(crds, p)
		if err != nil {
			return fmt.Errorf("failed to read CRD %q: %w", p, err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return fmt.Errorf("failed to decode CRD %q: %w", p, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return fmt.Errorf("failed to load CRD %q: kind is %q, not CustomResourceDefinition", p, crd.Kind)
		}
		for i := range crd.Spec.Versions {
			v := &crd.Spec.Versions[i]
			if !v.Served {
				continue
			}
			ks, err := newKindSchema(&crd, v)
			if err != nil {
				return fmt.Errorf("failed to build the schema of CRD %q version %q: %w", crd.Name, v.Name, err)
			}
			if _, dup := out[ks.gvk]; dup {
				return fmt.Errorf("failed to load CRD %q: %s is defined twice", p, ks.gvk)
			}
			out[ks.gvk] = ks
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("failed to load CRDs: no CustomResourceDefinition found")
	}
	return out, nil
}

// newKindSchema mirrors the API server: convert the v1 schema to the internal
// version, build the structural schema (with defaults pruned the way the server
// prunes them), the OpenAPI schema validator and the CEL validator.
func newKindSchema(crd *apiextensionsv1.CustomResourceDefinition, v *apiextensionsv1.CustomResourceDefinitionVersion) (*kindSchema, error) {
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("version has no openAPIV3Schema")
	}
	if crd.Spec.PreserveUnknownFields {
		// Such CRDs do not prune, so unknown fields could not be reported.
		return nil, fmt.Errorf("preserveUnknownFields is not supported")
	}
	var internal apiextensions.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, &internal, nil); err != nil {
		return nil, fmt.Errorf("failed to convert the schema to the internal version: %w", err)
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("failed to build the structural schema: %w", err)
	}
	if errs := structuralschema.ValidateStructural(nil, s); len(errs) > 0 {
		return nil, fmt.Errorf("schema is not structural: %w", errs.ToAggregate())
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, fmt.Errorf("failed to prune defaults: %w", err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("failed to build the schema validator: %w", err)
	}
	return &kindSchema{
		gvk:        schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind},
		namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		structural: s,
		validator:  validator,
		cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
	}, nil
}
