package chart_test

import (
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// separate are the values of the split layout: the bot API in a Deployment of its own, on the
// Postgres it needs.
var separate = []string{"--set", "botApi.separate=true", "--set", "database.existingSecret=botpool-db"}

func withSeparate(args ...string) []string { return append(slices.Clone(separate), args...) }

// container returns the pod's one container, which must have that name.
func container(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	if len(pod.Containers) != 1 || pod.Containers[0].Name != name {
		t.Fatalf("containers %v: want one named %s", pod.Containers, name)
	}
	return pod.Containers[0]
}

// selects reports whether a selector (matchLabels or a Service's selector) picks pods labelled l.
func selects(selector, l map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if l[k] != v {
			return false
		}
	}
	return true
}

// generatedBotAPIRules are the rules of config/rbac/bot_api_role.yaml, generated from the bot
// API's markers.
func generatedBotAPIRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	var r rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(repoRoot, "config", "rbac", "bot_api_role.yaml")), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Rules) == 0 {
		t.Fatal("config/rbac/bot_api_role.yaml has no rules")
	}
	return r.Rules
}

// TestSeparateBotAPI: with botApi.separate the bot API is a Deployment of its own, under a
// ServiceAccount bound to the generated bot API role only (no Secret), behind the bot API
// Service and a metrics Service of its own; the manager Deployment runs the controllers alone
// and exposes no bot API port; neither Deployment's selector picks the other's pods.
func TestSeparateBotAPI(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool", withSeparate("--set", "metrics.serviceMonitor.enabled=true")...)

	for _, k := range []string{"Deployment/botpool-bot-api", "ServiceAccount/botpool-bot-api", "ClusterRole/botpool-bot-api",
		"ClusterRoleBinding/botpool-bot-api", "Service/botpool-bot-api-metrics"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s; have %v", k, sorted(m.keys()))
		}
	}

	var mgr, api appsv1.Deployment
	m.decode(t, "Deployment", "botpool", &mgr)
	m.decode(t, "Deployment", "botpool-bot-api", &api)
	mc, ac := manager(t, mgr.Spec.Template.Spec), container(t, api.Spec.Template.Spec, "bot-api")

	// The controllers: --components=controllers, nothing of the bot API's.
	if mc.Args[0] != "--components=controllers" {
		t.Errorf("manager args %v: want --components=controllers first", mc.Args)
	}
	for _, a := range mc.Args {
		for _, botAPIOnly := range []string{"--bot-api-bind-address", "--bot-api-tls-", "--event-quota-"} {
			if strings.HasPrefix(a, botAPIOnly) {
				t.Errorf("manager arg %s: the controllers serve no bot API", a)
			}
		}
	}
	if got, want := containerPorts(mc), map[string]int32{"metrics": 8080, "probes": 8081}; !maps.Equal(got, want) {
		t.Errorf("manager ports %v, want %v: no bot API port", got, want)
	}
	if mgr.Spec.Template.Spec.ServiceAccountName != "botpool" || *mgr.Spec.Replicas != 2 {
		t.Errorf("manager: ServiceAccount %q, %d replicas", mgr.Spec.Template.Spec.ServiceAccountName, *mgr.Spec.Replicas)
	}

	// The bot API: --components=bot-api, its own ServiceAccount, the store, probes.
	wantArgs := []string{
		"--components=bot-api",
		"--leader-elect=false",
		"--metrics-bind-address=:8080",
		"--health-probe-bind-address=:8081",
		"--bot-api-bind-address=:8082",
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--event-quota-bot-events=20",
		"--event-quota-bot-bytes=65536",
		"--event-quota-namespace-events=200",
		"--event-quota-namespace-bytes=1048576",
		"--event-quota-window=30s",
		"--watch-namespaces=",
		"--metrics-secure=true",
		"--zap-log-level=info",
		"--zap-encoder=json",
	}
	if !slices.Equal(ac.Args, wantArgs) {
		t.Errorf("bot API args =\n  %v\nwant\n  %v", ac.Args, wantArgs)
	}
	if got, want := containerPorts(ac), map[string]int32{"metrics": 8080, "probes": 8081, "bot-api": 8082}; !maps.Equal(got, want) {
		t.Errorf("bot API ports %v, want %v", got, want)
	}
	if api.Spec.Template.Spec.ServiceAccountName != "botpool-bot-api" || *api.Spec.Replicas != 2 {
		t.Errorf("bot API: ServiceAccount %q, %d replicas; want botpool-bot-api, 2", api.Spec.Template.Spec.ServiceAccountName, *api.Spec.Replicas)
	}
	if len(ac.Env) != 1 || ac.Env[0].Name != "BOTPOOL_DATABASE_URL" || ac.Env[0].ValueFrom == nil ||
		ac.Env[0].ValueFrom.SecretKeyRef == nil || ac.Env[0].ValueFrom.SecretKeyRef.Name != "botpool-db" {
		t.Errorf("bot API env %+v: want BOTPOOL_DATABASE_URL from the Secret botpool-db (heartbeats go to the store)", ac.Env)
	}
	checkProbe(t, "bot API liveness", ac.LivenessProbe, "/healthz")
	checkProbe(t, "bot API readiness", ac.ReadinessProbe, "/readyz")
	checkRestricted(t, api.Spec.Template.Spec, ac)
	if ac.Resources.Requests.Memory().IsZero() || ac.Resources.Limits.Memory().IsZero() {
		t.Errorf("bot API resources %+v", ac.Resources)
	}

	// The pods: each Deployment selects its own only (the manager's selector is immutable, so the
	// bot API's pods must differ in a label it selects on).
	mgrPods, apiPods := mgr.Spec.Template.Labels, api.Spec.Template.Labels
	if !selects(mgr.Spec.Selector.MatchLabels, mgrPods) || selects(mgr.Spec.Selector.MatchLabels, apiPods) {
		t.Errorf("manager selector %v: picks its pods %v, not the bot API's %v?", mgr.Spec.Selector.MatchLabels, mgrPods, apiPods)
	}
	if !selects(api.Spec.Selector.MatchLabels, apiPods) || selects(api.Spec.Selector.MatchLabels, mgrPods) {
		t.Errorf("bot API selector %v: picks its pods %v, not the manager's %v?", api.Spec.Selector.MatchLabels, apiPods, mgrPods)
	}
	if tsc := api.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || !maps.Equal(tsc[0].LabelSelector.MatchLabels, api.Spec.Selector.MatchLabels) {
		t.Errorf("bot API topologySpreadConstraints %+v: want the bot API pods spread", tsc)
	}

	// The Services: the bot API's (the URL slots use) and one metrics Service per Deployment.
	for _, tc := range []struct {
		svc, port string
		pods      *appsv1.Deployment
		other     *appsv1.Deployment
	}{
		{"botpool-bot-api", "bot-api", &api, &mgr},
		{"botpool-bot-api-metrics", "metrics", &api, &mgr},
		{"botpool-metrics", "metrics", &mgr, &api},
	} {
		var svc corev1.Service
		m.decode(t, "Service", tc.svc, &svc)
		if !selects(svc.Spec.Selector, tc.pods.Spec.Template.Labels) || selects(svc.Spec.Selector, tc.other.Spec.Template.Labels) {
			t.Errorf("Service %s selects %v: want the %s pods only", tc.svc, svc.Spec.Selector, tc.pods.Name)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString(tc.port) {
			t.Errorf("Service %s ports %+v: want one to %s", tc.svc, svc.Spec.Ports, tc.port)
		}
		if _, ok := containerPorts(tc.pods.Spec.Template.Spec.Containers[0])[tc.port]; !ok {
			t.Errorf("Service %s targets %s, which %s's container does not declare", tc.svc, tc.port, tc.pods.Name)
		}
	}
	selector, _ := dig(m["ServiceMonitor/botpool"].u, "spec", "selector", "matchLabels").(map[string]any)
	for _, name := range []string{"botpool-metrics", "botpool-bot-api-metrics"} {
		var svc corev1.Service
		m.decode(t, "Service", name, &svc)
		for k, v := range selector {
			if svc.Labels[k] != v {
				t.Errorf("the ServiceMonitor selects %s=%v, which the Service %s (labels %v) lacks: its metrics go unscraped", k, v, name, svc.Labels)
			}
		}
	}

	// RBAC: the bot API's ServiceAccount is bound to the generated bot API role, and to the
	// metrics authentication role; to nothing that grants more of Secrets than get (a bound
	// bot's secret parameters, read by name as its binding is handed out).
	var role rbacv1.ClusterRole
	m.decode(t, "ClusterRole", "botpool-bot-api", &role)
	if !reflect.DeepEqual(role.Rules, generatedBotAPIRules(t)) {
		t.Errorf("ClusterRole botpool-bot-api rules\n%s\nwant the generated\n%s", mustYAML(t, role.Rules), mustYAML(t, generatedBotAPIRules(t)))
	}
	botAPISubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "botpool-bot-api", Namespace: namespace}
	bound := boundRoles(t, m, botAPISubject)
	if !sameSet(bound, []string{"ClusterRole/botpool-bot-api", "ClusterRole/botpool-metrics-auth"}) {
		t.Errorf("the bot API's ServiceAccount is bound to %v", bound)
	}
	var secretVerbs []string
	for _, r := range bound {
		for _, rule := range rulesOf(t, m, r) {
			if slices.Contains(rule.APIGroups, "") && (slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*")) {
				secretVerbs = append(secretVerbs, rule.Verbs...)
			}
		}
	}
	if !slices.Equal(secretVerbs, []string{"get"}) {
		t.Errorf("the bot API's ServiceAccount may %v Secrets, want get only (no list, watch or write)", secretVerbs)
	}
	// The manager keeps its own (Secrets included: the test would not tell the two apart else).
	managerBound := boundRoles(t, m, rbacv1.Subject{Kind: "ServiceAccount", Name: "botpool", Namespace: namespace})
	if !slices.Contains(managerBound, "ClusterRole/botpool-manager") || !grantsSecrets(rulesOf(t, m, "ClusterRole/botpool-manager")) {
		t.Errorf("the manager's ServiceAccount is bound to %v: want botpool-manager, with its Secret access", managerBound)
	}

	// The admission policy still names the manager alone: the bot API never binds a slot.
	p := string(m["ValidatingAdmissionPolicy/botpool-slot-binding"].raw)
	if !strings.Contains(p, "system:serviceaccount:botpool-system:botpool\\\"") || strings.Contains(p, "botpool-bot-api") {
		t.Errorf("the slot-binding policy must name the manager's ServiceAccount only:\n%s", p)
	}

	// Both Deployments' arguments are flags of the binary.
	for _, args := range [][]string{mc.Args, ac.Args} {
		if err := managerFlags(t).Parse(args); err != nil {
			t.Errorf("the binary would refuse %v: %v", args, err)
		}
	}
}

// boundRoles lists the roles ("Kind/name", a Role as "Role/namespace/name") bound to subject.
func boundRoles(t *testing.T, m manifest, subject rbacv1.Subject) []string {
	t.Helper()
	var out []string
	for _, o := range m {
		switch o.kind() {
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := yaml.UnmarshalStrict(o.raw, &b); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(b.Subjects, subject) {
				out = append(out, b.RoleRef.Kind+"/"+b.RoleRef.Name)
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict(o.raw, &b); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(b.Subjects, subject) {
				ref := b.RoleRef.Kind + "/" + b.RoleRef.Name
				if b.RoleRef.Kind == "Role" && b.Namespace != namespace {
					ref = "Role/" + b.Namespace + "/" + b.RoleRef.Name
				}
				out = append(out, ref)
			}
		}
	}
	return out
}

// rulesOf returns the rules of the rendered role key ("ClusterRole/name", "Role/ns/name").
func rulesOf(t *testing.T, m manifest, key string) []rbacv1.PolicyRule {
	t.Helper()
	o, ok := m[key]
	if !ok {
		t.Fatalf("no %s rendered", key)
	}
	var r struct {
		Rules []rbacv1.PolicyRule `json:"rules"`
	}
	if err := yaml.Unmarshal(o.raw, &r); err != nil {
		t.Fatal(err)
	}
	return r.Rules
}

// TestSeparateBotAPIWatchNamespaces: with watchNamespaces the bot API's rules are Roles in
// those namespaces, like the manager's, and nothing of it is cluster-wide but the metrics
// authentication.
func TestSeparateBotAPIWatchNamespaces(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool", withSeparate("-f", hardeningValues)...)
	if _, ok := m["ClusterRole/botpool-bot-api"]; ok {
		t.Error("ClusterRole botpool-bot-api rendered although watchNamespaces is set")
	}
	subject := rbacv1.Subject{Kind: "ServiceAccount", Name: "botpool-bot-api", Namespace: namespace}
	want := []string{"Role/team-a/botpool-bot-api", "Role/team-b/botpool-bot-api", "ClusterRole/botpool-metrics-auth"}
	if got := boundRoles(t, m, subject); !sameSet(got, want) {
		t.Errorf("the bot API's ServiceAccount is bound to %v, want %v", got, want)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		var role rbacv1.Role
		m.decode(t, "Role", ns+"/botpool-bot-api", &role)
		if !reflect.DeepEqual(role.Rules, generatedBotAPIRules(t)) {
			t.Errorf("Role botpool-bot-api in %s: rules %v, want the generated bot API rules", ns, role.Rules)
		}
	}
	var api appsv1.Deployment
	m.decode(t, "Deployment", "botpool-bot-api", &api)
	if args := container(t, api.Spec.Template.Spec, "bot-api").Args; !slices.Contains(args, "--watch-namespaces=team-a,team-b") {
		t.Errorf("bot API args %v lack --watch-namespaces=team-a,team-b", args)
	}
}

// TestSeparateBotAPITLS: the certificate goes to the pods that serve the bot API, and the URL
// slots get (set by the controllers) becomes https.
func TestSeparateBotAPITLS(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool", withSeparate("--set", "botApi.tls.secretName=bot-api-tls")...)
	var mgr, api appsv1.Deployment
	m.decode(t, "Deployment", "botpool", &mgr)
	m.decode(t, "Deployment", "botpool-bot-api", &api)
	mc, ac := manager(t, mgr.Spec.Template.Spec), container(t, api.Spec.Template.Spec, "bot-api")
	for _, arg := range []string{"--bot-api-tls-cert-file=/etc/botpool/bot-api-tls/tls.crt", "--bot-api-tls-key-file=/etc/botpool/bot-api-tls/tls.key"} {
		if !slices.Contains(ac.Args, arg) {
			t.Errorf("bot API args %v lack %s", ac.Args, arg)
		}
		if slices.Contains(mc.Args, arg) {
			t.Errorf("manager args carry %s: --components=controllers refuses it", arg)
		}
	}
	if !slices.Contains(mc.Args, "--bot-api-url=https://botpool-bot-api.botpool-system.svc:8082") {
		t.Errorf("manager args %v: want the https bot API URL for slots", mc.Args)
	}
	wantMount := corev1.VolumeMount{Name: "bot-api-tls", MountPath: "/etc/botpool/bot-api-tls", ReadOnly: true}
	hasMount := slices.ContainsFunc(ac.VolumeMounts, func(vm corev1.VolumeMount) bool { return reflect.DeepEqual(vm, wantMount) })
	if !hasMount || len(api.Spec.Template.Spec.Volumes) != 1 ||
		api.Spec.Template.Spec.Volumes[0].Secret == nil || api.Spec.Template.Spec.Volumes[0].Secret.SecretName != "bot-api-tls" {
		t.Errorf("bot API mounts %+v, volumes %+v: want the Secret bot-api-tls", ac.VolumeMounts, api.Spec.Template.Spec.Volumes)
	}
	if len(mc.VolumeMounts) != 0 || len(mgr.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("manager mounts %+v, volumes %+v: the controllers need no certificate", mc.VolumeMounts, mgr.Spec.Template.Spec.Volumes)
	}
}

// TestSeparateBotAPIDisruptionAndNetwork: a PodDisruptionBudget and a NetworkPolicy per
// Deployment. The bot API pods take the bot API port and may reach DNS, the API server and
// Postgres only, not Coolify, callback receivers or the manager's extra destinations; the
// manager pods no longer take the bot API port.
func TestSeparateBotAPIDisruptionAndNetwork(t *testing.T) {
	t.Parallel()
	extra := writeValues(t, `networkPolicy:
  egress:
    callbacks:
      cidrs: [198.51.100.0/24]
    botApiExtraRules:
      - to:
          - podSelector:
              matchLabels:
                app: pgbouncer
        ports:
          - port: 6432
            protocol: TCP
`)
	m := template(t, "botpool", withSeparate("-f", hardeningValues, "-f", extra, "--set", "podDisruptionBudget.enabled=true")...)
	var mgr, api appsv1.Deployment
	m.decode(t, "Deployment", "botpool", &mgr)
	m.decode(t, "Deployment", "botpool-bot-api", &api)

	for name, pods := range map[string]*appsv1.Deployment{"botpool": &mgr, "botpool-bot-api": &api} {
		var pdb policyv1.PodDisruptionBudget
		m.decode(t, "PodDisruptionBudget", name, &pdb)
		if !maps.Equal(pdb.Spec.Selector.MatchLabels, pods.Spec.Selector.MatchLabels) || *pdb.Spec.MinAvailable != intstr.FromInt32(1) {
			t.Errorf("PodDisruptionBudget %s: %+v; want minAvailable 1 of the %s pods", name, pdb.Spec, pods.Name)
		}
	}

	policy := func(name string, pods *appsv1.Deployment) (ingress []string, egress map[string][]int32, rules int) {
		var np networkingv1.NetworkPolicy
		m.decode(t, "NetworkPolicy", name, &np)
		if !maps.Equal(np.Spec.PodSelector.MatchLabels, pods.Spec.Selector.MatchLabels) {
			t.Errorf("NetworkPolicy %s selects %v, want the %s pods", name, np.Spec.PodSelector.MatchLabels, pods.Name)
		}
		declared := containerPorts(pods.Spec.Template.Spec.Containers[0])
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				ingress = append(ingress, p.Port.StrVal)
				if _, ok := declared[p.Port.StrVal]; !ok {
					t.Errorf("NetworkPolicy %s lets in port %q, which %s's container does not declare", name, p.Port.StrVal, pods.Name)
				}
			}
		}
		egress = map[string][]int32{}
		for _, r := range np.Spec.Egress {
			for _, to := range r.To {
				if to.IPBlock != nil {
					for _, p := range r.Ports {
						egress[to.IPBlock.CIDR] = append(egress[to.IPBlock.CIDR], p.Port.IntVal)
					}
				}
			}
		}
		return ingress, egress, len(np.Spec.Egress)
	}

	in, out, _ := policy("botpool", &mgr)
	if !sameSet(in, []string{"metrics", "probes"}) {
		t.Errorf("manager ingress ports %v: want metrics and probes, no bot API", in)
	}
	for _, cidr := range []string{"203.0.113.10/32", "198.51.100.0/24", "0.0.0.0/0"} {
		if _, ok := out[cidr]; !ok {
			t.Errorf("manager egress %v lacks %s (Coolify, callbacks, its extra rule)", out, cidr)
		}
	}

	in, out, rules := policy("botpool-bot-api", &api)
	if !sameSet(in, []string{"bot-api", "metrics", "probes"}) {
		t.Errorf("bot API ingress ports %v", in)
	}
	want := map[string][]int32{"10.0.0.1/32": {443, 6443}, "172.18.0.2/32": {443, 6443}, "10.20.0.0/24": {5432}}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("bot API egress %v, want the API server and Postgres only: %v", out, want)
	}
	// DNS, the API server, Postgres, and botApiExtraRules' pgbouncer.
	if rules != 4 {
		t.Errorf("bot API egress has %d rules, want 4 (DNS, API server, database, botApiExtraRules)", rules)
	}
}

// TestSeparateBotAPIRejected: the layouts that would break the operator or defeat the point
// fail at install time.
func TestSeparateBotAPIRejected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"without a shared store", []string{"--set", "botApi.separate=true"},
			[]string{"botApi.separate needs a shared store", "database.existingSecret"}},
		{"no ServiceAccount to run as", withSeparate("--set", "serviceAccount.create=false", "--set", "serviceAccount.name=botpool-operator"),
			[]string{"botApi.serviceAccount.name"}},
		{"the manager's ServiceAccount", withSeparate("--set", "botApi.serviceAccount.name=botpool"),
			[]string{`botApi.serviceAccount.name "botpool" is the manager's ServiceAccount`}},
		{"separate as a word", []string{"--set-string", "botApi.separate=yes"}, []string{"/botApi/separate"}},
		{"no replicas", withSeparate("--set", "botApi.replicaCount=0"), []string{"/botApi/replicaCount"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := templateErr(t, "botpool", tt.args...)
			if err == nil {
				t.Fatalf("%v rendered; want an error mentioning %q", tt.args, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}

	// An existing ServiceAccount of its own is fine.
	m := template(t, "pool", withSeparate("-f", nondefaultValues, "--set", "botApi.serviceAccount.name=bots-api")...)
	var api appsv1.Deployment
	m.decode(t, "Deployment", "pool-botpool-bot-api", &api)
	if sa := api.Spec.Template.Spec.ServiceAccountName; sa != "bots-api" {
		t.Errorf("bot API ServiceAccount %q, want bots-api", sa)
	}
	if n := len(m.ofKind("ServiceAccount")); n != 0 {
		t.Errorf("%d ServiceAccounts rendered with serviceAccount.create=false", n)
	}
}
