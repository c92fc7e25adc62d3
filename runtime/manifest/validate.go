package manifest

import (
	"context"
	"fmt"
	"sort"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
)

// This file replays, step by step, what the API server does to a custom
// resource on create and update (k8s.io/apiextensions-apiserver
// pkg/apiserver/customresource_handler.go and pkg/registry/customresource),
// calling the same library functions so that messages and field paths match.

// coerce is the server's unstructuredSchemaCoercer.apply: it checks and
// normalises metadata, prunes fields the schema does not know and drops nulls
// of non-nullable fields. With track set it returns the pruned paths, which a
// server with fieldValidation=Strict (kubectl apply's default) rejects.
func (ks *kindSchema) coerce(obj map[string]any, track bool) (*metav1.ObjectMeta, []string, error) {
	kind, apiVersion := obj["kind"], obj["apiVersion"]
	meta, _, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: track})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to decode metadata: %w", err)
	}
	unknown = append(unknown, structuralpruning.PruneWithOptions(obj, ks.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: track})...)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, ks.structural)
	ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, obj, ks.structural, false,
		schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: track})
	if ferr != nil {
		return nil, nil, ferr
	}
	unknown = append(unknown, paths...)

	obj["kind"], obj["apiVersion"] = kind, apiVersion
	if meta == nil {
		meta = &metav1.ObjectMeta{}
	}
	return meta, unknown, nil
}

// prepare takes a decoded object to the state the server validates: coerced,
// namespace filled in and defaults applied. It returns the unknown field paths
// when track is set. Callers handle status as the server's status subresource
// does: dropped on create, kept from the old object on update.
func (ks *kindSchema) prepare(obj map[string]any, track bool) (*metav1.ObjectMeta, []string, error) {
	meta, unknown, err := ks.coerce(obj, track)
	if err != nil {
		return nil, nil, err
	}
	if ks.namespaced && meta.Namespace == "" {
		meta.Namespace = DefaultNamespace
	}
	if err := schemaobjectmeta.SetObjectMeta(obj, meta); err != nil {
		return nil, nil, fmt.Errorf("failed to encode metadata: %w", err)
	}
	structuraldefaulting.Default(obj, ks.structural)
	return meta, unknown, nil
}

// validateCreate is customResourceStrategy.Validate: metadata, OpenAPI schema,
// embedded resources, list-type invariants and then, unless a blocking schema
// error makes them meaningless, the CEL rules. Transition rules (those using
// oldSelf) are skipped by the CEL validator because there is no old object.
func (ks *kindSchema) validateCreate(ctx context.Context, meta *metav1.ObjectMeta, obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, apivalidation.ValidateObjectMeta(meta, ks.namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	if meta.Name == "" && meta.GenerateName != "" {
		// kubectl apply refuses generateName too: an object in a file must be
		// addressable by name so that the next load finds the same object.
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "generateName"), "generateName is not supported; set metadata.name"))
	}
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, ks.validator)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, ks.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, ks.structural, obj)...)
	sortByField(errs)
	return append(errs, ks.validateRules(ctx, errs, obj, nil)...)
}

// validateUpdate is customResourceStrategy.ValidateUpdate, with validation
// ratcheting (GA since Kubernetes 1.33): errors in parts of the object that
// the update does not change are not reported, and transition rules run.
func (ks *kindSchema) validateUpdate(ctx context.Context, meta, oldMeta *metav1.ObjectMeta, obj, old map[string]any) field.ErrorList {
	correlated := common.NewCorrelatedObject(obj, old, &model.Structural{Structural: ks.structural})
	var errs field.ErrorList
	for _, err := range apivalidation.ValidateObjectMetaUpdate(meta, oldMeta, field.NewPath("metadata")) {
		// Optimistic concurrency (a resourceVersion is required on update)
		// belongs to whatever stores the objects, not to their validity.
		if err.Field != "metadata.resourceVersion" {
			errs = append(errs, err)
		}
	}
	errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, ks.validator, apiservervalidation.WithRatcheting(correlated))...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, ks.structural, false)...)
	if oldErrs := structurallisttype.ValidateListSetsAndMaps(nil, ks.structural, old); len(oldErrs) == 0 {
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, ks.structural, obj)...)
	}
	sortByField(errs)
	return append(errs, ks.validateRules(ctx, errs, obj, old, cel.WithRatcheting(correlated))...)
}

// validateRules runs the CEL rules with the server's per-object cost budget,
// unless errs holds an error the server treats as blocking (a rule could then
// see a value of the wrong type or size), in which case it reports, as the
// server does, that some rules were not checked.
func (ks *kindSchema) validateRules(ctx context.Context, errs field.ErrorList, obj, old map[string]any, opts ...cel.Option) field.ErrorList {
	if ks.cel == nil {
		return nil
	}
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return field.ErrorList{field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")}
		}
	}
	var oldObj any
	if old != nil {
		oldObj = old
	}
	ruleErrs, _ := ks.cel.Validate(ctx, nil, ks.structural, obj, oldObj, celconfig.RuntimeCELCostBudget, opts...)
	sortByField(ruleErrs)
	return ruleErrs
}

// sortByField orders errors by field path so that output does not depend on
// map iteration order; errors at one path keep the order the validator chose.
func sortByField(errs field.ErrorList) {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
}
