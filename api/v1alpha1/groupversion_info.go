// Package v1alpha1 holds the botpool.dev/v1alpha1 API: BotPool (a warm pool of Coolify
// applications for one meeting platform), BotPoolSlot (one of those applications) and Bot (one
// meeting to join). Validation lives in the CRDs themselves, as OpenAPI markers and CEL rules,
// so the API server refuses bad objects before any controller sees them.
//
// +kubebuilder:object:generate=true
// +groupName=botpool.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "botpool.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
