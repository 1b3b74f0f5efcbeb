package chart_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const nondefaultValues = "testdata/nondefault-values.yaml"

func TestLint(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"-f", nondefaultValues}, append([]string{"-f", nondefaultValues}, withSeparate("--set", "botApi.serviceAccount.name=bots-api")...)} {
		out, err := runHelm(t, append([]string{"lint", ".", "--strict", "--kube-version", kubeVersion(t)}, args...)...)
		if err != nil {
			t.Errorf("helm lint %v: %v", args, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", args, out)
		}
	}
}

// TestDefaults checks the release `helm install botpool charts/botpool -n botpool-system` makes.
func TestDefaults(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool")

	want := []string{
		"CustomResourceDefinition/botpools.botpool.dev",
		"CustomResourceDefinition/botpoolslots.botpool.dev",
		"CustomResourceDefinition/bots.botpool.dev",
		"ServiceAccount/botpool",
		"ClusterRole/botpool-manager",
		"ClusterRoleBinding/botpool-manager",
		"Role/botpool-leader-election",
		"RoleBinding/botpool-leader-election",
		"Service/botpool-bot-api",
		"Service/botpool-metrics",
		"Deployment/botpool",
		"ClusterRole/botpool-metrics-auth",
		"ClusterRoleBinding/botpool-metrics-auth",
		"ClusterRole/botpool-metrics-reader",
		"ValidatingAdmissionPolicy/botpool-slot-binding",
		"ValidatingAdmissionPolicyBinding/botpool-slot-binding",
	}
	if got := m.keys(); !sameSet(got, want) {
		t.Fatalf("rendered objects:\n  %v\nwant\n  %v", sorted(got), sorted(want))
	}
	for _, o := range m {
		namespaced := !slices.Contains([]string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, o.kind())
		if ns := str(o.u, "metadata", "namespace"); namespaced != (ns == namespace) {
			t.Errorf("%s/%s: namespace %q", o.kind(), o.name(), ns)
		}
		if str(o.u, "metadata", "labels", "app.kubernetes.io/instance") != "botpool" {
			t.Errorf("%s/%s lacks the chart's labels", o.kind(), o.name())
		}
	}
	for _, crd := range m.ofKind("CustomResourceDefinition") {
		if got := str(crd.u, "metadata", "annotations", "helm.sh/resource-policy"); got != "keep" {
			t.Errorf("%s: helm.sh/resource-policy = %q, want keep", crd.name(), got)
		}
	}

	var d appsv1.Deployment
	m.decode(t, "Deployment", "botpool", &d)
	if *d.Spec.Replicas != 1 {
		t.Errorf("replicas = %d, want 1 (the in-memory store is not shared between replicas)", *d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "botpool" {
		t.Errorf("serviceAccountName = %q", pod.ServiceAccountName)
	}
	c := manager(t, pod)
	if want := "botpool:" + chartYAML(t)["appVersion"]; c.Image != want {
		t.Errorf("image = %q, want %q (the tag defaults to appVersion)", c.Image, want)
	}
	wantArgs := []string{
		"--leader-elect=true",
		"--metrics-bind-address=:8080",
		"--health-probe-bind-address=:8081",
		"--bot-api-bind-address=:8082",
		"--bot-api-url=http://botpool-bot-api.botpool-system.svc:8082",
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--max-concurrent-reconciles=8",
		"--coolify-rate-limit=200",
		"--coolify-max-in-flight=4",
		"--coolify-allow-private-networks=false",
		"--egress-allowed-cidrs=",
		"--reconcile-timeout=1m",
		"--schedule-lead=2m",
		"--cluster-name=",
		"--retention-events=720h",
		"--retention-transitions=2160h",
		"--retention-finished-bots=720h",
		"--retention-interval=1h",
		"--event-quota-bot-events=20",
		"--event-quota-bot-bytes=65536",
		"--event-quota-namespace-events=200",
		"--event-quota-namespace-bytes=1048576",
		"--event-quota-window=30s",
		"--callback-allow-private-networks=false",
		"--callback-allowed-cidrs=",
		"--watch-namespaces=",
		"--allow-insecure-bot-api-url=false",
		"--metrics-secure=true",
		"--zap-log-level=info",
		"--zap-encoder=json",
	}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args =\n  %v\nwant\n  %v", c.Args, wantArgs)
	}
	if len(c.Env) != 0 {
		t.Errorf("env = %v, want none (the in-memory store, no database URL anywhere)", c.Env)
	}
	wantPorts := map[string]int32{"metrics": 8080, "probes": 8081, "bot-api": 8082}
	if got := containerPorts(c); !maps.Equal(got, wantPorts) {
		t.Errorf("container ports = %v, want %v", got, wantPorts)
	}
	checkProbe(t, "liveness", c.LivenessProbe, "/healthz")
	checkProbe(t, "readiness", c.ReadinessProbe, "/readyz")
	checkRestricted(t, pod, c)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 30 {
		t.Errorf("terminationGracePeriodSeconds = %v", pod.TerminationGracePeriodSeconds)
	}
	if len(pod.TopologySpreadConstraints) != 1 ||
		!maps.Equal(pod.TopologySpreadConstraints[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("topologySpreadConstraints = %+v: want one spreading the manager pods", pod.TopologySpreadConstraints)
	}

	checkService(t, m, "botpool-bot-api", &d, corev1.ServiceTypeClusterIP, "bot-api", 8082)
	checkService(t, m, "botpool-metrics", &d, corev1.ServiceTypeClusterIP, "metrics", 8080)

	var sa corev1.ServiceAccount
	m.decode(t, "ServiceAccount", "botpool", &sa)
	var crb rbacv1.ClusterRoleBinding
	m.decode(t, "ClusterRoleBinding", "botpool-manager", &crb)
	var rb rbacv1.RoleBinding
	m.decode(t, "RoleBinding", "botpool-leader-election", &rb)
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "botpool", Namespace: namespace}
	for _, b := range []struct {
		name     string
		subjects []rbacv1.Subject
		ref      rbacv1.RoleRef
		wantRef  rbacv1.RoleRef
	}{
		{"ClusterRoleBinding", crb.Subjects, crb.RoleRef, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "botpool-manager"}},
		{"RoleBinding", rb.Subjects, rb.RoleRef, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "botpool-leader-election"}},
	} {
		if !slices.Equal(b.subjects, []rbacv1.Subject{wantSubject}) || b.ref != b.wantRef {
			t.Errorf("%s binds %v to %v, want %v to %v", b.name, b.subjects, b.ref, wantSubject, b.wantRef)
		}
	}
}

// TestNonDefaultValues switches every optional feature on and changes most defaults.
func TestNonDefaultValues(t *testing.T) {
	t.Parallel()
	m := template(t, "pool", "-f", nondefaultValues)

	for _, gone := range []string{"CustomResourceDefinition", "ServiceAccount"} {
		if objs := m.ofKind(gone); len(objs) != 0 {
			t.Errorf("%d %s rendered, want none", len(objs), gone)
		}
	}

	var d appsv1.Deployment
	m.decode(t, "Deployment", "pool-botpool", &d)
	pod := d.Spec.Template.Spec
	c := manager(t, pod)
	if *d.Spec.Replicas != 3 || c.Image != "registry.example.com/botpool/manager:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("replicas %d, image %q, pull policy %q", *d.Spec.Replicas, c.Image, c.ImagePullPolicy)
	}
	for _, arg := range []string{
		"--metrics-bind-address=:9090", "--health-probe-bind-address=:9091", "--bot-api-bind-address=:9092",
		"--bot-api-url=https://bots.example.com",
		"--kube-api-qps=750.5", "--kube-api-burst=2000000", "--max-concurrent-reconciles=16",
		"--coolify-rate-limit=150", "--schedule-lead=5m30s", "--cluster-name=staging-eu1",
		"--retention-events=0", "--retention-transitions=8760h", "--retention-finished-bots=48h", "--retention-interval=15m",
		"--event-quota-bot-events=2.5", "--event-quota-bot-bytes=10000", "--event-quota-namespace-events=0",
		"--event-quota-namespace-bytes=20000000", "--event-quota-window=1m",
		"--callback-allow-private-networks=true", "--callback-allowed-cidrs=10.20.0.0/16,fd00::/8",
		"--coolify-max-in-flight=2", "--coolify-allow-private-networks=true",
		"--egress-allowed-cidrs=10.0.5.0/24,fd00:1::/64", "--reconcile-timeout=90s",
		"--zap-log-level=debug", "--zap-encoder=console", "--zap-stacktrace-level=panic",
	} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	wantEnv := []corev1.EnvVar{
		{Name: "BOTPOOL_DATABASE_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "botpool-db"}, Key: "dsn"}}},
		{Name: "GOMAXPROCS", Value: "2"},
	}
	if got, _ := yaml.Marshal(c.Env); string(got) != mustYAML(t, wantEnv) {
		t.Errorf("env =\n%s\nwant\n%s", got, mustYAML(t, wantEnv))
	}
	for _, a := range c.Args {
		if strings.Contains(a, "postgres") || strings.HasPrefix(a, "--database-url") {
			t.Errorf("the database URL must come from the Secret only, got arg %q", a)
		}
	}
	checkProbe(t, "liveness", c.LivenessProbe, "/healthz")
	if c.LivenessProbe.InitialDelaySeconds != 30 || c.LivenessProbe.FailureThreshold != 5 {
		t.Errorf("liveness probe timing %+v not taken from the values", c.LivenessProbe)
	}
	checkRestricted(t, pod, c)
	if pod.ServiceAccountName != "botpool-operator" || pod.PriorityClassName != "system-cluster-critical" ||
		*pod.TerminationGracePeriodSeconds != 60 || pod.NodeSelector["kubernetes.io/os"] != "linux" ||
		len(pod.Tolerations) != 1 || pod.Affinity == nil || pod.Affinity.NodeAffinity == nil ||
		len(pod.ImagePullSecrets) != 1 || len(pod.Volumes) != 1 || len(c.VolumeMounts) != 1 {
		t.Errorf("pod spec does not carry the values: %+v", pod)
	}
	if tsc := pod.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].LabelSelector.MatchLabels["team"] != "meetings" {
		t.Errorf("topologySpreadConstraints = %+v: a given labelSelector must be kept", tsc)
	}
	meta := d.Spec.Template.ObjectMeta
	if meta.Labels["team"] != "meetings" || meta.Annotations["example.com/scrape"] != "false" {
		t.Errorf("pod labels %v, annotations %v", meta.Labels, meta.Annotations)
	}

	bot := checkService(t, m, "pool-botpool-bot-api", &d, corev1.ServiceTypeLoadBalancer, "bot-api", 80)
	if bot.Spec.Ports[0].NodePort != 30082 || !slices.Equal(bot.Spec.LoadBalancerSourceRanges, []string{"203.0.113.0/24"}) ||
		bot.Annotations["service.beta.kubernetes.io/aws-load-balancer-type"] != "nlb" {
		t.Errorf("bot API Service %+v", bot)
	}
	metrics := checkService(t, m, "pool-botpool-metrics", &d, corev1.ServiceTypeClusterIP, "metrics", 9090)

	var pdb policyv1.PodDisruptionBudget
	m.decode(t, "PodDisruptionBudget", "pool-botpool", &pdb)
	if *pdb.Spec.MinAvailable != intstr.FromInt32(2) || !maps.Equal(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget spec %+v", pdb.Spec)
	}

	sm, ok := m["ServiceMonitor/pool-botpool"]
	if !ok {
		t.Fatalf("no ServiceMonitor; have %v", m.keys())
	}
	if str(sm.u, "apiVersion") != "monitoring.coreos.com/v1" || str(sm.u, "metadata", "labels", "release") != "prometheus" {
		t.Errorf("ServiceMonitor %v", sm.u)
	}
	selector, _ := dig(sm.u, "spec", "selector", "matchLabels").(map[string]any)
	for k, v := range selector {
		if metrics.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%v, which the metrics Service (labels %v) lacks", k, v, metrics.Labels)
		}
	}
	endpoints, _ := dig(sm.u, "spec", "endpoints").([]any)
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", endpoints)
	}
	ep, _ := endpoints[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" || ep["interval"] != "15s" || ep["scrapeTimeout"] != "10s" {
		t.Errorf("ServiceMonitor endpoint %v", ep)
	}

	// Bindings point at the existing ServiceAccount named in the values.
	var crb rbacv1.ClusterRoleBinding
	m.decode(t, "ClusterRoleBinding", "pool-botpool-manager", &crb)
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != "botpool-operator" {
		t.Errorf("ClusterRoleBinding subjects %v", crb.Subjects)
	}
}

// TestToggles covers the values that add or remove objects one at a time.
func TestToggles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		set   []string
		check func(t *testing.T, m manifest)
	}{
		{"CRDs without keep", []string{"crds.keep=false"}, func(t *testing.T, m manifest) {
			crds := m.ofKind("CustomResourceDefinition")
			if len(crds) != 3 {
				t.Fatalf("%d CRDs", len(crds))
			}
			for _, crd := range crds {
				if _, ok := dig(crd.u, "metadata", "annotations", "helm.sh/resource-policy").(string); ok {
					t.Errorf("%s still has helm.sh/resource-policy", crd.name())
				}
			}
		}},
		{"no RBAC", []string{"rbac.create=false"}, func(t *testing.T, m manifest) {
			for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
				if n := len(m.ofKind(kind)); n != 0 {
					t.Errorf("%d %s rendered", n, kind)
				}
			}
		}},
		{"metrics off", []string{"metrics.enabled=false", "metrics.serviceMonitor.enabled=true"}, func(t *testing.T, m manifest) {
			if _, ok := m["Service/botpool-metrics"]; ok {
				t.Error("metrics Service rendered")
			}
			if n := len(m.ofKind("ServiceMonitor")); n != 0 {
				t.Error("ServiceMonitor rendered without metrics")
			}
			var d appsv1.Deployment
			m.decode(t, "Deployment", "botpool", &d)
			c := manager(t, d.Spec.Template.Spec)
			if !slices.Contains(c.Args, "--metrics-bind-address=0") {
				t.Errorf("args %v: want --metrics-bind-address=0", c.Args)
			}
			if _, ok := containerPorts(c)["metrics"]; ok {
				t.Error("metrics container port still declared")
			}
		}},
		{"image digest", []string{"image.digest=sha256:" + strings.Repeat("ab", 32), "image.tag=ignored"}, func(t *testing.T, m manifest) {
			var d appsv1.Deployment
			m.decode(t, "Deployment", "botpool", &d)
			if got := manager(t, d.Spec.Template.Spec).Image; got != "botpool@sha256:"+strings.Repeat("ab", 32) {
				t.Errorf("image = %q", got)
			}
		}},
		{"single replica without leader election", []string{"replicaCount=1", "leaderElection.enabled=false"}, func(t *testing.T, m manifest) {
			var d appsv1.Deployment
			m.decode(t, "Deployment", "botpool", &d)
			if c := manager(t, d.Spec.Template.Spec); c.Args[0] != "--leader-elect=false" {
				t.Errorf("args %v", c.Args)
			}
		}},
		{"two replicas by default with Postgres", []string{"database.existingSecret=pg"}, func(t *testing.T, m manifest) {
			var d appsv1.Deployment
			m.decode(t, "Deployment", "botpool", &d)
			if *d.Spec.Replicas != 2 {
				t.Errorf("replicas = %d, want 2: leader election makes that safe and every replica serves the bot API", *d.Spec.Replicas)
			}
		}},
		{"Postgres URL through extraEnv counts as a shared store", []string{"replicaCount=2",
			"extraEnv[0].name=BOTPOOL_DATABASE_URL", "extraEnv[0].valueFrom.secretKeyRef.name=own", "extraEnv[0].valueFrom.secretKeyRef.key=dsn"},
			func(t *testing.T, m manifest) {
				var d appsv1.Deployment
				m.decode(t, "Deployment", "botpool", &d)
				if *d.Spec.Replicas != 2 {
					t.Errorf("replicas = %d", *d.Spec.Replicas)
				}
			}},
		{"PDB percentage", []string{"podDisruptionBudget.enabled=true", "podDisruptionBudget.minAvailable=50%"}, func(t *testing.T, m manifest) {
			var pdb policyv1.PodDisruptionBudget
			m.decode(t, "PodDisruptionBudget", "botpool", &pdb)
			if *pdb.Spec.MinAvailable != intstr.FromString("50%") {
				t.Errorf("minAvailable = %v", pdb.Spec.MinAvailable)
			}
		}},
		{"fullnameOverride", []string{"fullnameOverride=bp"}, func(t *testing.T, m manifest) {
			for _, k := range []string{"Deployment/bp", "Service/bp-bot-api", "Service/bp-metrics", "ClusterRole/bp-manager", "ServiceAccount/bp"} {
				if _, ok := m[k]; !ok {
					t.Errorf("no %s; have %v", k, m.keys())
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := make([]string, 0, 2*len(tt.set))
			for _, s := range tt.set {
				args = append(args, "--set", s)
			}
			tt.check(t, template(t, "botpool", args...))
		})
	}
}

// TestRejected: values.schema.json and the template guards turn mistakes into clear errors at
// install time instead of a broken Deployment.
func TestRejected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values string
		args   []string
		want   []string
	}{
		{"replicas as a word", "replicaCount: two\n", nil, []string{"/replicaCount", "got string, want null or integer"}},
		{"unknown key", "replicas: 2\n", nil, []string{"additional properties 'replicas' not allowed"}},
		{"database URL in plain values", "database:\n  url: postgres://u:p@db/botpool\n", nil, []string{"/database", "additional properties 'url' not allowed"}},
		{"log level", "logging:\n  level: warn\n", nil, []string{"/logging/level"}},
		{"pull policy", "image:\n  pullPolicy: Sometimes\n", nil, []string{"/image/pullPolicy"}},
		{"service type", "botApi:\n  service:\n    type: ExternalName\n", nil, []string{"/botApi/service/type"}},
		{"port", "containerPorts:\n  botApi: 70000\n", nil, []string{"/containerPorts/botApi"}},
		{"zero QPS", "kubeAPIQPS: 0\n", nil, []string{"/kubeAPIQPS"}},
		{"zero Coolify rate limit", "coolifyRateLimit: 0\n", nil, []string{"/coolifyRateLimit"}},
		{"schedule lead without a unit", "scheduleLead: 120\n", nil, []string{"/scheduleLead"}},
		{"schedule lead in words", "scheduleLead: 2 minutes\n", nil, []string{"/scheduleLead"}},
		{"retention without a unit", "retention:\n  events: 30\n", nil, []string{"/retention/events"}},
		{"negative event quota", "eventQuota:\n  botEventsPerSecond: -1\n", nil, []string{"/eventQuota/botEventsPerSecond"}},
		{"unknown event quota", "eventQuota:\n  perPod: 1\n", nil, []string{"perPod"}},
		{"callback CIDR as a word", "callbacks:\n  allowedCIDRs: [cluster]\n", nil, []string{"/callbacks/allowedCIDRs/0"}},
		{"callback CIDRs as a string", "callbacks:\n  allowedCIDRs: 10.0.0.0/8\n", nil, []string{"/callbacks/allowedCIDRs"}},
		{"PDB minAvailable", "podDisruptionBudget:\n  minAvailable: half\n", nil, []string{"/podDisruptionBudget/minAvailable"}},
		{"scrape interval", "metrics:\n  serviceMonitor:\n    interval: 30\n", nil, []string{"/metrics/serviceMonitor/interval"}},
		{"replicas without leader election", "replicaCount: 2\nleaderElection:\n  enabled: false\ndatabase:\n  existingSecret: pg\n", nil,
			[]string{"replicaCount > 1 needs leaderElection.enabled"}},
		{"replicas without a shared store", "replicaCount: 2\n", nil,
			[]string{"replicaCount > 1 needs a shared store", "database.existingSecret"}},
		{"Kubernetes too old", "", []string{"--kube-version", "v1.28.0"}, []string{"chart requires kubeVersion"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-f", writeValues(t, tt.values)}, tt.args...)
			_, err := templateErr(t, "botpool", args...)
			if err == nil {
				t.Fatalf("values %q rendered; want an error mentioning %q", tt.values, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func manager(t *testing.T, pod corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "manager" {
		t.Fatalf("containers %v: want one named manager", pod.Containers)
	}
	return pod.Containers[0]
}

func containerPorts(c corev1.Container) map[string]int32 {
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	return ports
}

func checkProbe(t *testing.T, which string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port != intstr.FromString("probes") {
		t.Errorf("%s probe %+v: want GET %s on the probes port", which, p, path)
	}
}

// checkRestricted asserts the "restricted" Pod Security Standard and a read-only root.
func checkRestricted(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatalf("pod security context %v, container security context %v", psc, sc)
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container security context %+v: want no privilege escalation, read-only root, all capabilities dropped", sc)
	}
}

// checkService asserts a Service's type and single port, that its selector picks the manager
// pods and that its target port is a named port of the manager container.
func checkService(t *testing.T, m manifest, name string, d *appsv1.Deployment, typ corev1.ServiceType, portName string, port int32) corev1.Service {
	t.Helper()
	var svc corev1.Service
	m.decode(t, "Service", name, &svc)
	if svc.Spec.Type != typ || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != port ||
		svc.Spec.Ports[0].TargetPort != intstr.FromString(portName) {
		t.Errorf("Service %s: type %s, ports %+v; want %s, port %d to %s", name, svc.Spec.Type, svc.Spec.Ports, typ, port, portName)
	}
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s selects nothing", name)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the manager pods (labels %v) lack", name, k, v, d.Spec.Template.Labels)
		}
	}
	if _, ok := containerPorts(manager(t, d.Spec.Template.Spec))[portName]; !ok {
		t.Errorf("Service %s targets port %q, which the manager container does not declare", name, portName)
	}
	return svc
}

func chartYAML(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range c {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }
