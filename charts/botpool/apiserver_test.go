package chart_test

import (
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"botpool.dev/botpool/internal/kubetest"
)

// TestAcceptedByAPIServer applies what the chart renders to a real kube-apiserver (envtest):
// the CRDs as the chart templates them, the RBAC, ServiceAccount, Services, Deployment and
// PodDisruptionBudget. Then it creates a Pod from the Deployment's template in a namespace that
// enforces the "restricted" Pod Security Standard, so the API server's own admission confirms
// the security context. (envtest runs no controllers, so the Deployment never makes pods.)
func TestAcceptedByAPIServer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: `make test` sets it (the other checks of the chart run without it)")
	}
	helm(t) // skip before starting a control plane when there is no helm
	env, err := kubetest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := env.Client

	for _, tc := range []struct {
		release string
		args    []string
		// objects the chart expects to exist already
		existing []client.Object
	}{
		{"botpool", []string{"--set", "podDisruptionBudget.enabled=true"}, nil},
		{"pool", []string{"-f", nondefaultValues}, []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "botpool-operator"}},
		}},
	} {
		t.Run(tc.release, func(t *testing.T) {
			ctx := t.Context()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "chart-", Labels: map[string]string{
				"pod-security.kubernetes.io/enforce":         "restricted",
				"pod-security.kubernetes.io/enforce-version": "latest",
			}}}
			if err := c.Create(ctx, ns); err != nil {
				t.Fatal(err)
			}
			for _, o := range tc.existing {
				o.SetNamespace(ns.Name)
				if err := c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}

			m := templateIn(t, ns.Name, tc.release, tc.args...)
			for key, o := range m {
				if o.kind() == "ServiceMonitor" {
					continue // the Prometheus Operator's CRD is not installed here
				}
				u := &unstructured.Unstructured{Object: o.u}
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("chart-test"), client.ForceOwnership); err != nil {
					t.Errorf("applying %s: %v", key, err)
				}
			}

			var d appsv1.Deployment
			m.decode(t, "Deployment", fullname(tc.release), &d)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "manager-", Namespace: ns.Name, Labels: d.Spec.Template.Labels},
				Spec:       d.Spec.Template.Spec,
			}
			if err := c.Create(ctx, pod); err != nil {
				t.Errorf("a pod of the Deployment's template is refused: %v", err)
			}

			// The examples of NOTES.txt are valid objects (the API server checks the CRDs' schema
			// and CEL rules; no controller runs to act on them).
			if tc.release == "botpool" {
				for _, ex := range notesExamples(t, renderNotes(t)) {
					ex.SetNamespace(ns.Name)
					if err := c.Create(ctx, ex); err != nil {
						t.Errorf("the %s of NOTES.txt is refused: %v", ex.GetKind(), err)
					}
				}
			}

			// The check above means something only if the namespace really enforces.
			weak := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "weak-", Namespace: ns.Name},
				Spec:       *d.Spec.Template.Spec.DeepCopy(),
			}
			weak.Spec.SecurityContext = nil
			weak.Spec.Containers[0].SecurityContext = nil
			if err := c.Create(ctx, weak); err == nil || !strings.Contains(err.Error(), "PodSecurity") {
				t.Errorf("a pod without security context: %v; want a PodSecurity refusal", err)
			}
		})
	}
}
