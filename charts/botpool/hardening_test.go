package chart_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

const hardeningValues = "testdata/hardening-values.yaml"

func TestLintHardening(t *testing.T) {
	t.Parallel()
	out, err := runHelm(t, "lint", ".", "--strict", "--kube-version", kubeVersion(t), "-f", hardeningValues)
	if err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint:\n%s", out)
	}
}

// grantsSecrets reports whether rules give any access to Secrets.
func grantsSecrets(rules []rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "") && (slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*")) {
			return true
		}
	}
	return false
}

// TestWatchNamespacesRBAC: with watchNamespaces the manager's rules are Roles in those
// namespaces and no ClusterRole grants Secrets; without it, the ClusterRole does (which is
// what the setting exists to avoid).
func TestWatchNamespacesRBAC(t *testing.T) {
	t.Parallel()
	generated := generatedRules(t)

	all := template(t, "botpool")
	var cr rbacv1.ClusterRole
	all.decode(t, "ClusterRole", "botpool-manager", &cr)
	if !grantsSecrets(cr.Rules) {
		t.Fatal("the default ClusterRole grants no Secret access: this test no longer tells the two modes apart")
	}

	m := template(t, "botpool", "-f", hardeningValues)
	for _, key := range []string{"ClusterRole/botpool-manager", "ClusterRoleBinding/botpool-manager"} {
		if _, ok := m[key]; ok {
			t.Errorf("%s rendered although watchNamespaces is set", key)
		}
	}
	for _, o := range m.ofKind("ClusterRole") {
		var r rbacv1.ClusterRole
		m.decode(t, "ClusterRole", o.name(), &r)
		if grantsSecrets(r.Rules) {
			t.Errorf("ClusterRole %s grants Secret access cluster-wide: %v", o.name(), r.Rules)
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		var role rbacv1.Role
		m.decode(t, "Role", ns+"/botpool-manager", &role)
		if role.Namespace != ns || !reflect.DeepEqual(role.Rules, generated) {
			t.Errorf("Role in %s: namespace %q, rules %v; want the generated rules %v", ns, role.Namespace, role.Rules, generated)
		}
		var rb rbacv1.RoleBinding
		m.decode(t, "RoleBinding", ns+"/botpool-manager", &rb)
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "botpool", Namespace: namespace}}
		if rb.Namespace != ns || rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "botpool-manager"}) ||
			!slices.Equal(rb.Subjects, want) {
			t.Errorf("RoleBinding in %s: %+v", ns, rb)
		}
	}
	// Namespaces are cluster-scoped: a ClusterRole grants them, and nothing else.
	var nsRole rbacv1.ClusterRole
	m.decode(t, "ClusterRole", "botpool-namespaces", &nsRole)
	wantNS := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(nsRole.Rules, wantNS) {
		t.Errorf("ClusterRole botpool-namespaces grants %v; want namespaces get, list, watch only", nsRole.Rules)
	}
	var nsBinding rbacv1.ClusterRoleBinding
	m.decode(t, "ClusterRoleBinding", "botpool-namespaces", &nsBinding)
	if nsBinding.RoleRef.Name != "botpool-namespaces" || len(nsBinding.Subjects) != 1 || nsBinding.Subjects[0].Name != "botpool" {
		t.Errorf("ClusterRoleBinding botpool-namespaces: %+v", nsBinding)
	}
	// The Lease stays in the release namespace.
	if _, ok := m["Role/botpool-leader-election"]; !ok {
		t.Errorf("no leader-election Role; have %v", m.keys())
	}
	if args := managerArgs(t, m, "botpool"); !slices.Contains(args, "--watch-namespaces=team-a,team-b") {
		t.Errorf("args %v lack --watch-namespaces=team-a,team-b", args)
	}
}

func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	m := template(t, "botpool")
	var cr rbacv1.ClusterRole
	m.decode(t, "ClusterRole", "botpool-manager", &cr)
	return cr.Rules
}

func managerArgs(t *testing.T, m manifest, name string) []string {
	t.Helper()
	var d appsv1.Deployment
	m.decode(t, "Deployment", name, &d)
	return manager(t, d.Spec.Template.Spec).Args
}

// TestBotAPITLS: a TLS Secret is mounted (not with subPath, so renewals reach the pod), the
// manager serves HTTPS with it, and the default URL becomes https.
func TestBotAPITLS(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool", "--set", "botApi.tls.secretName=bot-api-tls")
	var d appsv1.Deployment
	m.decode(t, "Deployment", "botpool", &d)
	c := manager(t, d.Spec.Template.Spec)
	for _, arg := range []string{
		"--bot-api-tls-cert-file=/etc/botpool/bot-api-tls/tls.crt",
		"--bot-api-tls-key-file=/etc/botpool/bot-api-tls/tls.key",
		"--bot-api-url=https://botpool-bot-api.botpool-system.svc:8082",
	} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	wantMount := corev1.VolumeMount{Name: "bot-api-tls", MountPath: "/etc/botpool/bot-api-tls", ReadOnly: true}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return reflect.DeepEqual(vm, wantMount) }) {
		t.Errorf("volume mounts %+v lack %+v", c.VolumeMounts, wantMount)
	}
	vols := d.Spec.Template.Spec.Volumes
	if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.SecretName != "bot-api-tls" {
		t.Errorf("volumes %+v: want the Secret bot-api-tls", vols)
	}

	// Extra volumes keep working next to it.
	both := template(t, "pool", "-f", nondefaultValues, "--set", "botApi.tls.secretName=bot-api-tls")
	var d2 appsv1.Deployment
	both.decode(t, "Deployment", "pool-botpool", &d2)
	if n := len(d2.Spec.Template.Spec.Volumes); n != 2 || len(d2.Spec.Template.Spec.Containers[0].VolumeMounts) != 2 {
		t.Errorf("TLS and extra volumes: %d volumes, mounts %+v", n, d2.Spec.Template.Spec.Containers[0].VolumeMounts)
	}

	// Without it: plain http, no mount, no TLS flags.
	plain := managerArgs(t, template(t, "botpool"), "botpool")
	for _, a := range plain {
		if strings.HasPrefix(a, "--bot-api-tls") {
			t.Errorf("TLS flag %s rendered without botApi.tls.secretName", a)
		}
	}
}

// TestSecureMetrics: on by default, with the RBAC the authentication filter needs and an HTTPS
// ServiceMonitor; off, none of it.
func TestSecureMetrics(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool", "--set", "metrics.serviceMonitor.enabled=true")
	if args := managerArgs(t, m, "botpool"); !slices.Contains(args, "--metrics-secure=true") {
		t.Errorf("args %v lack --metrics-secure=true", args)
	}
	var auth rbacv1.ClusterRole
	m.decode(t, "ClusterRole", "botpool-metrics-auth", &auth)
	wantAuth := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(auth.Rules, wantAuth) {
		t.Errorf("metrics-auth rules %+v", auth.Rules)
	}
	var crb rbacv1.ClusterRoleBinding
	m.decode(t, "ClusterRoleBinding", "botpool-metrics-auth", &crb)
	if crb.RoleRef.Name != "botpool-metrics-auth" || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "botpool" {
		t.Errorf("metrics-auth binding %+v", crb)
	}
	var reader rbacv1.ClusterRole
	m.decode(t, "ClusterRole", "botpool-metrics-reader", &reader)
	if len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(reader.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("metrics-reader rules %+v", reader.Rules)
	}
	ep := serviceMonitorEndpoint(t, m)
	if ep["scheme"] != "https" || ep["bearerTokenFile"] == nil || dig(ep, "tlsConfig", "insecureSkipVerify") != true {
		t.Errorf("ServiceMonitor endpoint %v: want https with the Prometheus token", ep)
	}

	off := template(t, "botpool", "--set", "metrics.secure=false", "--set", "metrics.serviceMonitor.enabled=true")
	for _, key := range []string{"ClusterRole/botpool-metrics-auth", "ClusterRoleBinding/botpool-metrics-auth", "ClusterRole/botpool-metrics-reader"} {
		if _, ok := off[key]; ok {
			t.Errorf("%s rendered with metrics.secure=false", key)
		}
	}
	if args := managerArgs(t, off, "botpool"); !slices.Contains(args, "--metrics-secure=false") {
		t.Errorf("args %v lack --metrics-secure=false", args)
	}
	if ep := serviceMonitorEndpoint(t, off); ep["scheme"] != "http" || ep["bearerTokenFile"] != nil {
		t.Errorf("ServiceMonitor endpoint %v: want plain http", ep)
	}
}

func serviceMonitorEndpoint(t *testing.T, m manifest) map[string]any {
	t.Helper()
	sm, ok := m["ServiceMonitor/botpool"]
	if !ok {
		t.Fatalf("no ServiceMonitor; have %v", m.keys())
	}
	eps, _ := dig(sm.u, "spec", "endpoints").([]any)
	if len(eps) != 1 {
		t.Fatalf("endpoints %v", eps)
	}
	ep, _ := eps[0].(map[string]any)
	return ep
}

// TestNetworkPolicy: ingress only to the bot API, metrics and probe ports; egress only to DNS,
// the API server and the listed CIDRs.
func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	if n := len(template(t, "botpool").ofKind("NetworkPolicy")); n != 0 {
		t.Errorf("%d NetworkPolicies rendered by default, want none", n)
	}
	m := template(t, "botpool", "-f", hardeningValues)
	var np networkingv1.NetworkPolicy
	m.decode(t, "NetworkPolicy", "botpool", &np)
	var d appsv1.Deployment
	m.decode(t, "Deployment", "botpool", &d)
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("podSelector %v, want the manager pods' %v", np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v", np.Spec.PolicyTypes)
	}
	var ingressPorts []string
	declared := containerPorts(manager(t, d.Spec.Template.Spec))
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			ingressPorts = append(ingressPorts, p.Port.StrVal)
			if _, ok := declared[p.Port.StrVal]; !ok {
				t.Errorf("ingress to port %q, which the manager container does not declare", p.Port.StrVal)
			}
		}
		if len(r.Ports) == 0 {
			t.Errorf("an ingress rule without ports opens every port: %+v", r)
		}
		if slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.StrVal == "metrics" }) &&
			(len(r.From) != 1 || r.From[0].NamespaceSelector == nil) {
			t.Errorf("metrics ingress from %+v: want the monitoring namespace of the values", r.From)
		}
	}
	if !sameSet(ingressPorts, []string{"bot-api", "metrics", "probes"}) {
		t.Errorf("ingress ports %v", ingressPorts)
	}

	cidrs := map[string][]int32{}
	dns := false
	for _, r := range np.Spec.Egress {
		if len(r.To) == 0 && (len(r.Ports) == 0 || r.Ports[0].Port.IntVal != 53) {
			t.Errorf("an egress rule to anywhere: %+v", r)
		}
		for _, p := range r.Ports {
			if p.Port.IntVal == 53 {
				dns = true
			}
		}
		for _, to := range r.To {
			if to.IPBlock == nil {
				continue
			}
			for _, p := range r.Ports {
				cidrs[to.IPBlock.CIDR] = append(cidrs[to.IPBlock.CIDR], p.Port.IntVal)
			}
		}
	}
	want := map[string][]int32{
		"10.0.0.1/32": {443, 6443}, "172.18.0.2/32": {443, 6443}, // the API server
		"203.0.113.10/32": {443},  // Coolify
		"10.20.0.0/24":    {5432}, // Postgres
		"0.0.0.0/0":       {443},  // the extra rule
	}
	if !reflect.DeepEqual(cidrs, want) {
		t.Errorf("egress CIDRs and ports %v, want %v", cidrs, want)
	}
	if !dns {
		t.Error("no DNS egress")
	}

	// The API server is not optional.
	_, err := templateErr(t, "botpool", "--set", "networkPolicy.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "networkPolicy.egress.apiServer.cidrs") {
		t.Errorf("networkPolicy without API server CIDRs: %v, want an error naming networkPolicy.egress.apiServer.cidrs", err)
	}
	_, err = templateErr(t, "botpool", "-f", writeValues(t, "networkPolicy:\n  egress:\n    coolify:\n      cidrs: [coolify.example.com]\n"))
	if err == nil || !strings.Contains(err.Error(), "/networkPolicy/egress/coolify/cidrs/0") {
		t.Errorf("a host name as a CIDR: %v, want a schema error", err)
	}
}

// TestAdmissionPolicyToggle: the slot-binding policy is rendered on Kubernetes 1.30 and later
// by default (ValidatingAdmissionPolicy is GA there), not on 1.29, and the value forces it.
func TestAdmissionPolicyToggle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kube string
		set  []string
		want bool
	}{
		{kubeVersion(t), nil, true},
		{"v1.30.0", nil, true},
		{"v1.29.4", nil, false},
		{"v1.29.4", []string{"--set", "admissionPolicy.enabled=true"}, true},
		{kubeVersion(t), []string{"--set", "admissionPolicy.enabled=false"}, false},
	} {
		out, err := runHelm(t, append([]string{"template", "botpool", ".", "--namespace", namespace, "--kube-version", tc.kube}, tc.set...)...)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(out, "kind: ValidatingAdmissionPolicy\n") && strings.Contains(out, "kind: ValidatingAdmissionPolicyBinding\n")
		if got != tc.want {
			t.Errorf("Kubernetes %s, %v: policy rendered %v, want %v", tc.kube, tc.set, got, tc.want)
		}
	}
	m := template(t, "botpool")
	p := m["ValidatingAdmissionPolicy/botpool-slot-binding"]
	if !strings.Contains(string(p.raw), `system:serviceaccount:botpool-system:botpool`) {
		t.Errorf("the policy does not name the manager's ServiceAccount:\n%s", p.raw)
	}
}
