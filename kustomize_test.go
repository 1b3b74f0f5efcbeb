package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/kubetest"
)

// kustomizeDefault builds config/default with kustomize's Go API, as `kubectl apply -k` would,
// keyed by Kind/name.
func kustomizeDefault(t *testing.T) (map[string]*unstructured.Unstructured, []*unstructured.Unstructured) {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy // `kubectl kustomize`'s order: Namespace and CRDs first
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), "config/default")
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	byKey := map[string]*unstructured.Unstructured{}
	var ordered []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil { // integers as int64, as the client expects
			t.Fatalf("%s: %v", y, err)
		}
		key := u.GetKind() + "/" + u.GetName()
		if _, dup := byKey[key]; dup {
			t.Fatalf("%s built twice", key)
		}
		byKey[key] = u
		ordered = append(ordered, u)
	}
	return byKey, ordered
}

func fromUnstructured(t *testing.T, objs map[string]*unstructured.Unstructured, key string, into any) {
	t.Helper()
	u, ok := objs[key]
	if !ok {
		keys := make([]string, 0, len(objs))
		for k := range objs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("config/default has no %s; it has %v", key, keys)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

// TestKustomizeDefault builds config/default and applies every object it holds to a real API
// server (a control plane of its own: the slot-binding policy would bind the other tests of
// this package). Each must be accepted; a Pod of the Deployment's template must pass the
// namespace's "restricted" Pod Security admission; the bot API and metrics Services must
// select the manager's pods and reach the ports it listens on, at the address --bot-api-url
// gives bot containers; the RBAC must name the Deployment's ServiceAccount; and the admission
// policy must let that ServiceAccount, and no one else, create BotPoolSlots.
func TestKustomizeDefault(t *testing.T) {
	objs, ordered := kustomizeDefault(t)
	var d appsv1.Deployment
	fromUnstructured(t, objs, "Deployment/botpool-manager", &d)
	ns := d.Namespace
	if ns == "" {
		t.Fatal("the Deployment has no namespace")
	}
	pod := d.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	o, err := parseFlags(c.Args)
	if err != nil {
		t.Fatalf("the manager refuses its args: %v", err)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	listens := func(addr string) int32 {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%q: %v", addr, err)
		}
		var n int32
		_, _ = fmt.Sscan(port, &n)
		return n
	}
	for name, addr := range map[string]string{"bot-api": o.botAPIAddr, "metrics": o.metricsAddr, "probes": o.probeAddr} {
		if ports[name] != listens(addr) {
			t.Errorf("container port %s is %d, the manager listens on %s", name, ports[name], addr)
		}
	}
	if !selects(d.Spec.Selector, pod.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector, pod.Labels)
	}

	// The Services select the pods and send to the named container ports; the bot API's is
	// the one --bot-api-url names.
	botAPI, err := url.Parse(o.botAPIURL)
	if err != nil {
		t.Fatal(err)
	}
	for name, portName := range map[string]string{"botpool-bot-api": "bot-api", "botpool-metrics": "metrics"} {
		var svc corev1.Service
		fromUnstructured(t, objs, "Service/"+name, &svc)
		if svc.Namespace != ns {
			t.Errorf("Service %s in %q, the Deployment in %q", name, svc.Namespace, ns)
		}
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("Service %s selects %v, not the manager's pods %v", name, svc.Spec.Selector, pod.Labels)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != portName || ports[portName] == 0 {
			t.Errorf("Service %s ports %+v: want one to the container port %s", name, svc.Spec.Ports, portName)
			continue
		}
		if name == "botpool-bot-api" {
			if want := name + "." + ns + ".svc"; botAPI.Hostname() != want || botAPI.Port() != fmt.Sprint(svc.Spec.Ports[0].Port) {
				t.Errorf("--bot-api-url=%s: want http://%s:%d, the bot API Service", o.botAPIURL, want, svc.Spec.Ports[0].Port)
			}
		}
	}

	// The ServiceAccount exists, and every binding grants to it.
	var sa corev1.ServiceAccount
	fromUnstructured(t, objs, "ServiceAccount/"+pod.Spec.ServiceAccountName, &sa)
	bindings := 0
	for key, u := range objs {
		var subjects []rbacv1.Subject
		switch u.GetKind() {
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			fromUnstructured(t, objs, key, &b)
			subjects = b.Subjects
		case "RoleBinding":
			var b rbacv1.RoleBinding
			fromUnstructured(t, objs, key, &b)
			subjects = b.Subjects
		default:
			continue
		}
		bindings++
		if want := (rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}); !slices.Equal(subjects, []rbacv1.Subject{want}) {
			t.Errorf("%s binds %v, want the manager's ServiceAccount %s/%s", key, subjects, ns, sa.Name)
		}
	}
	if bindings != 3 {
		t.Errorf("%d bindings, want 3 (manager, metrics authentication, leader election)", bindings)
	}

	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: the build was checked, not applied (`make test` sets it)")
	}
	env, err := kubetest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := t.Context()
	for _, u := range ordered {
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
			client.FieldOwner("kustomize-test"), client.ForceOwnership); err != nil {
			t.Errorf("applying %s/%s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	// The API server agrees about what was applied, with its defaults.
	var live appsv1.Deployment
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&d), &live); err != nil {
		t.Fatal(err)
	}
	if live.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("live Deployment runs as %q", live.Spec.Template.Spec.ServiceAccountName)
	}

	// A pod of the template passes the namespace's Pod Security admission, which is enforced.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "manager-", Namespace: ns, Labels: pod.Labels}, Spec: pod.Spec}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Errorf("a pod of the Deployment's template is refused: %v", err)
	}
	weak := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "weak-", Namespace: ns}, Spec: *pod.Spec.DeepCopy()}
	weak.Spec.SecurityContext, weak.Spec.Containers[0].SecurityContext = nil, nil
	if err := env.Client.Create(ctx, weak); err == nil || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("a pod without security context in %s: %v; want a PodSecurity refusal", ns, err)
	}

	// The slot-binding policy: the manager's ServiceAccount creates slots, an administrator
	// cannot.
	as := func(user string, groups ...string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	slot := func() *v1.BotPoolSlot {
		return &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{GenerateName: "meet-", Namespace: "default"}, Spec: v1.BotPoolSlotSpec{Pool: "meet"}}
	}
	admin := as("alice", "system:masters")
	kubetest.Eventually(t, 30*time.Second, func() error { // the API server loads a new policy
		err := admin.Create(ctx, slot())
		switch {
		case err == nil:
			return errors.New("an administrator created a BotPoolSlot")
		case !strings.Contains(err.Error(), "only the botpool manager"):
			return fmt.Errorf("refused for another reason: %w", err)
		}
		return nil
	})
	if err := as("system:serviceaccount:"+ns+":"+sa.Name).Create(ctx, slot()); err != nil {
		t.Errorf("the manager's ServiceAccount cannot create a BotPoolSlot: %v", err)
	}
}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(l))
}

// TestKustomizeMatchesChart: config/default runs the manager as the Helm chart does by
// default: the same arguments, ports, probes, resources and security contexts, the same
// ClusterRole rules (the generated ones and the metrics authentication), and the same
// slot-binding policy but for the ServiceAccount's name. A setting changed in one and not the
// other fails here.
func TestKustomizeMatchesChart(t *testing.T) {
	objs, _ := kustomizeDefault(t)
	chart := renderChart(t)
	decode := func(key string, into any) {
		t.Helper()
		decodeRendered(t, chart, key, into)
	}
	var kd, cd appsv1.Deployment
	fromUnstructured(t, objs, "Deployment/botpool-manager", &kd)
	decode("Deployment/botpool", &cd)
	kc, cc := kd.Spec.Template.Spec.Containers[0], cd.Spec.Template.Spec.Containers[0]
	if !slices.Equal(kc.Args, cc.Args) {
		t.Errorf("args differ:\nkustomize %v\nchart     %v", kc.Args, cc.Args)
	}
	for _, f := range []struct {
		what string
		k, c any
	}{
		{"image", kc.Image, cc.Image},
		{"imagePullPolicy", kc.ImagePullPolicy, cc.ImagePullPolicy},
		{"ports", kc.Ports, cc.Ports},
		{"livenessProbe", kc.LivenessProbe, cc.LivenessProbe},
		{"readinessProbe", kc.ReadinessProbe, cc.ReadinessProbe},
		{"resources", kc.Resources, cc.Resources},
		{"env", kc.Env, cc.Env},
		{"securityContext", kc.SecurityContext, cc.SecurityContext},
		{"pod securityContext", kd.Spec.Template.Spec.SecurityContext, cd.Spec.Template.Spec.SecurityContext},
		{"terminationGracePeriodSeconds", kd.Spec.Template.Spec.TerminationGracePeriodSeconds, cd.Spec.Template.Spec.TerminationGracePeriodSeconds},
		{"replicas", kd.Spec.Replicas, cd.Spec.Replicas},
	} {
		if !apiequality.Semantic.DeepEqual(f.k, f.c) {
			t.Errorf("%s differs:\nkustomize %s\nchart     %s", f.what, mustYAML(t, f.k), mustYAML(t, f.c))
		}
	}
	spread := func(d appsv1.Deployment) []corev1.TopologySpreadConstraint {
		out := slices.Clone(d.Spec.Template.Spec.TopologySpreadConstraints)
		for i := range out {
			if !selects(out[i].LabelSelector, d.Spec.Template.Labels) {
				t.Errorf("topology spread constraint %d of %s does not select its pods", i, d.Name)
			}
			out[i].LabelSelector = nil // each names its own labels
		}
		return out
	}
	if k, c := spread(kd), spread(cd); !apiequality.Semantic.DeepEqual(k, c) {
		t.Errorf("topologySpreadConstraints differ:\nkustomize %s\nchart     %s", mustYAML(t, k), mustYAML(t, c))
	}

	for kName, cName := range map[string]string{"botpool-manager": "botpool-manager", "botpool-metrics-auth": "botpool-metrics-auth", "botpool-metrics-reader": "botpool-metrics-reader"} {
		var k, c rbacv1.ClusterRole
		fromUnstructured(t, objs, "ClusterRole/"+kName, &k)
		decode("ClusterRole/"+cName, &c)
		if !apiequality.Semantic.DeepEqual(k.Rules, c.Rules) {
			t.Errorf("ClusterRole %s: rules differ:\nkustomize %s\nchart     %s", kName, mustYAML(t, k.Rules), mustYAML(t, c.Rules))
		}
	}
	var kl, cl rbacv1.Role
	fromUnstructured(t, objs, "Role/botpool-leader-election", &kl)
	decode("Role/botpool-leader-election", &cl)
	if !apiequality.Semantic.DeepEqual(kl.Rules, cl.Rules) {
		t.Errorf("leader election rules differ:\nkustomize %s\nchart     %s", mustYAML(t, kl.Rules), mustYAML(t, cl.Rules))
	}

	var kp, cp admissionv1.ValidatingAdmissionPolicy
	fromUnstructured(t, objs, "ValidatingAdmissionPolicy/botpool-slot-binding", &kp)
	decode("ValidatingAdmissionPolicy/botpool-slot-binding", &cp)
	// The chart's manager is system:serviceaccount:botpool-system:botpool; kustomize's is
	// botpool-manager: compare the rest.
	ky := strings.ReplaceAll(mustJSON(t, kp.Spec), "system:serviceaccount:botpool-system:botpool-manager", "MANAGER")
	cy := strings.ReplaceAll(mustJSON(t, cp.Spec), "system:serviceaccount:botpool-system:botpool", "MANAGER")
	if !strings.Contains(ky, "MANAGER") || ky != cy {
		t.Errorf("slot-binding policy differs:\nkustomize %s\nchart     %s", ky, cy)
	}
	var kb, cb admissionv1.ValidatingAdmissionPolicyBinding
	fromUnstructured(t, objs, "ValidatingAdmissionPolicyBinding/botpool-slot-binding", &kb)
	decode("ValidatingAdmissionPolicyBinding/botpool-slot-binding", &cb)
	if !apiequality.Semantic.DeepEqual(kb.Spec, cb.Spec) {
		t.Errorf("slot-binding policy binding differs: %+v, chart %+v", kb.Spec, cb.Spec)
	}

	// Every kind the chart renders by default is in config/default too.
	have := map[string]bool{}
	for _, u := range objs {
		have[u.GetKind()] = true
	}
	for key := range chart {
		if kind, _, _ := strings.Cut(key, "/"); !have[kind] {
			t.Errorf("the chart renders %s by default; config/default has no %s", key, kind)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
