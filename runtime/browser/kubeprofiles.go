package browser

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// KubeProfiles keeps profiles as BrowserProfile resources (cluster mode),
// labelled as agent-made and with the owning agent, so GitOps and kubectl
// see them; the operator runs their browser pods and stores their data.
type KubeProfiles struct {
	Client    client.Client
	Namespace string
	// LocalRoot, when set, is where profiles' Chrome folders live when the
	// browser is launched in this pod rather than in a browser pod.
	LocalRoot string
}

func (s *KubeProfiles) toProfile(bp *picobotv1alpha1.BrowserProfile) Profile {
	storage := string(picobotv1alpha1.StorageS3)
	if bp.Spec.Persistence != nil && bp.Spec.Persistence.Storage != "" {
		storage = string(bp.Spec.Persistence.Storage)
	}
	return Profile{ID: bp.Name, Label: bp.Spec.Label, Storage: storage, Agent: bp.Labels[picobotv1alpha1.LabelAgent],
		Created: bp.CreationTimestamp.UTC()}
}

// UserDataDir implements ProfileStore.
func (s *KubeProfiles) UserDataDir(_, id string) string {
	if s.LocalRoot == "" || !ValidProfileID(id) {
		return ""
	}
	return filepath.Join(s.LocalRoot, id, "chrome")
}

func (s *KubeProfiles) get(ctx context.Context, agent, id string) (*picobotv1alpha1.BrowserProfile, error) {
	if !ValidProfileID(id) {
		return nil, fmt.Errorf("%w: %q is not a profile id (ids look like bp-0123456789; use one from list)", ErrProfileNotFound, id)
	}
	bp := &picobotv1alpha1.BrowserProfile{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: id}, bp); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrProfileNotFound, id)
		}
		return nil, fmt.Errorf("failed to get BrowserProfile %s/%s: %w", s.Namespace, id, err)
	}
	if bp.Labels[picobotv1alpha1.LabelAgent] != agent {
		return nil, fmt.Errorf("%w: %s", ErrProfileNotFound, id)
	}
	return bp, nil
}

// Create implements ProfileStore.
func (s *KubeProfiles) Create(ctx context.Context, agent, label string) (Profile, error) {
	if label != "" {
		if err := CheckLabel(label); err != nil {
			return Profile{}, err
		}
	}
	for range 3 {
		bp := &picobotv1alpha1.BrowserProfile{
			ObjectMeta: metav1.ObjectMeta{Name: NewProfileID(), Namespace: s.Namespace, Labels: map[string]string{
				picobotv1alpha1.LabelAgentMade: "true",
				picobotv1alpha1.LabelAgent:     agent,
			}},
			Spec: picobotv1alpha1.BrowserProfileSpec{Label: label},
		}
		err := s.Client.Create(ctx, bp)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return Profile{}, fmt.Errorf("failed to create BrowserProfile in %s: %w", s.Namespace, err)
		}
		return s.toProfile(bp), nil
	}
	return Profile{}, fmt.Errorf("failed to create BrowserProfile in %s: no free name", s.Namespace)
}

// Get implements ProfileStore.
func (s *KubeProfiles) Get(ctx context.Context, agent, id string) (Profile, error) {
	bp, err := s.get(ctx, agent, id)
	if err != nil {
		return Profile{}, err
	}
	return s.toProfile(bp), nil
}

// SetLabel implements ProfileStore.
func (s *KubeProfiles) SetLabel(ctx context.Context, agent, id, label string) (Profile, error) {
	if err := CheckLabel(label); err != nil {
		return Profile{}, err
	}
	bp, err := s.get(ctx, agent, id)
	if err != nil {
		return Profile{}, err
	}
	patch := client.MergeFrom(bp.DeepCopy())
	bp.Spec.Label = label
	if err := s.Client.Patch(ctx, bp, patch); err != nil {
		return Profile{}, fmt.Errorf("failed to relabel BrowserProfile %s/%s: %w", s.Namespace, id, err)
	}
	return s.toProfile(bp), nil
}

// List implements ProfileStore: the agent's BrowserProfiles, oldest first.
func (s *KubeProfiles) List(ctx context.Context, agent string) ([]Profile, error) {
	var list picobotv1alpha1.BrowserProfileList
	if err := s.Client.List(ctx, &list, client.InNamespace(s.Namespace),
		client.MatchingLabels{picobotv1alpha1.LabelAgent: agent}); err != nil {
		return nil, fmt.Errorf("failed to list BrowserProfiles in %s: %w", s.Namespace, err)
	}
	out := make([]Profile, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, s.toProfile(&list.Items[i]))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Delete implements ProfileStore. The operator removes the stored profile
// data when the resource goes.
func (s *KubeProfiles) Delete(ctx context.Context, agent, id string) error {
	bp, err := s.get(ctx, agent, id)
	if err != nil {
		return err
	}
	if err := s.Client.Delete(ctx, bp, client.Preconditions{UID: &bp.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete BrowserProfile %s/%s: %w", s.Namespace, id, err)
	}
	return nil
}
