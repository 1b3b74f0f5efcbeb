// Package v1alpha1 holds the botpool.dev/v1alpha1 API: BotPool (a warm pool of Coolify
// applications for one meeting platform), BotPoolSlot (one of those applications) and Bot (one
// meeting to join). Validation lives in the CRDs themselves, as OpenAPI markers and CEL rules,
// so the API server refuses bad objects before any controller sees them.
//
// +kubebuilder:object:generate=true
// +groupName=botpool.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "botpool.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&BotPool{}, &BotPoolList{},
		&BotPoolSlot{}, &BotPoolSlotList{},
		&Bot{}, &BotList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
