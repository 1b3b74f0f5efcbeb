package chart_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
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
		// One slot-binding policy at a time: each lets only its own release's manager bind.
		{"pool", []string{"-f", nondefaultValues, "--set", "admissionPolicy.enabled=false"}, []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "botpool-operator"}},
		}},
		// watchNamespaces (the release's own namespace here, set below): namespaced Roles.
		{"watch", []string{"-f", hardeningValues, "--set", "admissionPolicy.enabled=false"}, nil},
		// The bot API apart, in a Deployment of its own under its own ServiceAccount.
		{"apart", withSeparate("--set", "podDisruptionBudget.enabled=true", "--set", "admissionPolicy.enabled=false"), nil},
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

			args := tc.args
			if tc.release == "watch" {
				args = append(slices.Clone(args), "--set", "watchNamespaces={"+ns.Name+"}")
			}
			m := templateIn(t, ns.Name, tc.release, args...)
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
			for _, o := range m.ofKind("Deployment") {
				var dep appsv1.Deployment
				m.decode(t, "Deployment", o.name(), &dep)
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{GenerateName: "pod-", Namespace: ns.Name, Labels: dep.Spec.Template.Labels},
					Spec:       dep.Spec.Template.Spec,
				}
				if err := c.Create(ctx, pod); err != nil {
					t.Errorf("a pod of the Deployment %s's template is refused: %v", dep.Name, err)
				}
			}
			if tc.release == "apart" {
				checkBotAPIServiceAccount(t, env, ns.Name, fullname(tc.release)+"-bot-api")
			}

			// The examples of NOTES.txt are valid objects (the API server checks the CRDs' schema
			// and CEL rules; no controller runs to act on them).
			if tc.release == "botpool" {
				checkSlotBindingPolicy(t, env, ns.Name, "botpool")
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

// checkSlotBindingPolicy: with the chart's ValidatingAdmissionPolicy in force, a user the API
// server lets do anything else (system:masters) cannot create a BotPoolSlot or change its
// spec.botRef, while the manager's ServiceAccount (through the chart's RBAC) can; other edits
// of a slot stay open to others.
func checkSlotBindingPolicy(t *testing.T, env *kubetest.Env, ns, serviceAccount string) {
	t.Helper()
	ctx := t.Context()
	as := func(user string, groups ...string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	manager := as("system:serviceaccount:" + ns + ":" + serviceAccount)
	alice := as("alice", "system:masters")
	newSlot := func() *v1.BotPoolSlot {
		return &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{GenerateName: "meet-", Namespace: ns}, Spec: v1.BotPoolSlotSpec{Pool: "meet"}}
	}
	refused := func(err error) error {
		if err == nil {
			return errors.New("allowed")
		}
		if !strings.Contains(err.Error(), "only the botpool manager") {
			return fmt.Errorf("refused for another reason: %w", err)
		}
		return nil
	}

	// The API server applies a new policy once it has loaded it: wait for that (liveness).
	kubetest.Eventually(t, 30*time.Second, func() error {
		err := alice.Create(ctx, newSlot())
		if err := refused(err); err != nil {
			return fmt.Errorf("a slot created by another user: %w", err)
		}
		return nil
	})

	slot := newSlot()
	if err := manager.Create(ctx, slot); err != nil {
		t.Fatalf("the manager's ServiceAccount cannot create a slot: %v", err)
	}
	// Others may still label it: the binding is untouched.
	labelled := slot.DeepCopy()
	labelled.Labels = map[string]string{"team": "meetings"}
	if err := alice.Patch(ctx, labelled, client.MergeFrom(slot)); err != nil {
		t.Errorf("labelling a slot as another user: %v", err)
	}
	bound := labelled.DeepCopy()
	bound.Spec.BotRef = &v1.BotReference{Name: "standup", UID: "0f5e1c7e-0000-4000-8000-000000000001"}
	if err := refused(alice.Patch(ctx, bound, client.MergeFrom(labelled))); err != nil {
		t.Errorf("binding a slot as another user: %v", err)
	}
	if err := manager.Patch(ctx, bound, client.MergeFrom(labelled)); err != nil {
		t.Fatalf("binding a slot as the manager: %v", err)
	}
	unbound := bound.DeepCopy()
	unbound.Spec.BotRef = nil
	if err := refused(alice.Patch(ctx, unbound, client.MergeFrom(bound))); err != nil {
		t.Errorf("unbinding a slot as another user: %v", err)
	}
	if err := manager.Patch(ctx, unbound, client.MergeFrom(bound)); err != nil {
		t.Errorf("unbinding a slot as the manager: %v", err)
	}
}

// checkBotAPIServiceAccount: the API server, given the chart's RBAC, lets the bot API's
// ServiceAccount read bots and slots, patch Bot status and get a Secret by name (a bound bot's
// secret parameters), and refuses it any list or write of Secrets, any change of a slot and of
// a Bot's spec.
func checkBotAPIServiceAccount(t *testing.T, env *kubetest.Env, ns, serviceAccount string) {
	t.Helper()
	ctx := t.Context()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + serviceAccount}
	botAPI, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "coolify-credentials", Namespace: ns}, StringData: map[string]string{"token": "t"}}
	// No slot is created: the first case's admission policy lets its own manager alone do that.
	// Authorization comes first, so a write the role lacks is refused whether it exists or not.
	slot := &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{Name: "meet-001", Namespace: ns}, Spec: v1.BotPoolSlotSpec{Pool: "meet"}}
	bot := &v1.Bot{ObjectMeta: metav1.ObjectMeta{Name: "standup", Namespace: ns}, Spec: v1.BotSpec{MeetingURL: "https://zoom.us/j/123"}}
	for _, o := range []client.Object{secret, bot} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// What it needs: if these were refused, the refusals below would prove nothing.
	if err := botAPI.List(ctx, &v1.BotPoolSlotList{}, client.InNamespace(ns)); err != nil {
		t.Errorf("the bot API's ServiceAccount listing slots: %v", err)
	}
	reported := bot.DeepCopy()
	reported.Status.Phase = v1.BotInCall
	if err := botAPI.Status().Patch(ctx, reported, client.MergeFrom(bot)); err != nil {
		t.Errorf("the bot API's ServiceAccount patching a Bot's status: %v", err)
	}
	if err := botAPI.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); err != nil {
		t.Errorf("the bot API's ServiceAccount getting a Secret by name (secret parameters): %v", err)
	}
	for what, err := range map[string]error{
		"listing Secrets":   botAPI.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)),
		"creating a Secret": botAPI.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns}}),
		"binding a slot": botAPI.Patch(ctx, &v1.BotPoolSlot{ObjectMeta: slot.ObjectMeta,
			Spec: v1.BotPoolSlotSpec{Pool: "meet", BotRef: &v1.BotReference{Name: bot.Name, UID: bot.UID}}}, client.MergeFrom(slot)),
		"changing a Bot's spec": botAPI.Patch(ctx, &v1.Bot{ObjectMeta: bot.ObjectMeta,
			Spec: v1.BotSpec{MeetingURL: bot.Spec.MeetingURL, DisplayName: "Someone else"}}, client.MergeFrom(bot)),
	} {
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot ") {
			t.Errorf("the bot API's ServiceAccount %s: %v, want Forbidden by RBAC", what, err)
		}
	}
}
