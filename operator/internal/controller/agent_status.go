package controller

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
)

func modelCondition(m agentspec.ModelResolution) metav1.Condition {
	return condition(picobotv1alpha1.ConditionModelResolved, m.Effective != nil, m.Reason, m.Message)
}

func toolsCondition(err error, warnings []string, n int) metav1.Condition {
	switch {
	case err != nil:
		return condition(picobotv1alpha1.ConditionToolsResolved, false, picobotv1alpha1.ReasonInvalidToolPolicy, err.Error())
	case len(warnings) > 0:
		return condition(picobotv1alpha1.ConditionToolsResolved, true, picobotv1alpha1.ReasonResolvedWithWarnings,
			fmt.Sprintf("%d tools; %s", n, strings.Join(warnings, "; ")))
	default:
		return condition(picobotv1alpha1.ConditionToolsResolved, true, picobotv1alpha1.ReasonResolved, fmt.Sprintf("%d tools", n))
	}
}

// referencesCondition reports missing and invalid references; both lists are
// already sorted so the message is stable.
func referencesCondition(missing, invalid []string) metav1.Condition {
	switch {
	case len(invalid) > 0:
		return condition(picobotv1alpha1.ConditionReferencesResolved, false, picobotv1alpha1.ReasonInvalidReference, strings.Join(append(invalid, missing...), "; "))
	case len(missing) > 0:
		return condition(picobotv1alpha1.ConditionReferencesResolved, false, picobotv1alpha1.ReasonReferenceNotFound, "Not found: "+strings.Join(missing, ", "))
	default:
		return condition(picobotv1alpha1.ConditionReferencesResolved, true, picobotv1alpha1.ReasonResolved, "All references exist")
	}
}
