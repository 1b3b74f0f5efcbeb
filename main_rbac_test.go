package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/slottoken"
)

// managerRole is config/rbac/role.yaml, the ClusterRole generated from the RBAC markers.
func managerRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatal(err)
	}
	return &role
}

// TestSecretVerbs: the manager may get Secrets and create and delete its slots' token Secrets;
// nothing more. No list or watch (it caches no Secret), no update or patch (a token is
// replaced, never changed).
func TestSecretVerbs(t *testing.T) {
	var verbs []string
	for _, r := range managerRole(t).Rules {
		if slices.Contains(r.APIGroups, "") && (slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*")) {
			verbs = append(verbs, r.Verbs...)
		}
	}
	slices.Sort(verbs)
	if want := []string{"create", "delete", "get"}; !slices.Equal(verbs, want) {
		t.Errorf("Secret verbs %v, want %v", verbs, want)
	}
}

// TestManagerCachesNoSecrets: the manager's client reads Secrets from the API server, never
// through an informer (which would hold every Secret it may see, and need list and watch).
func TestManagerCachesNoSecrets(t *testing.T) {
	o := managerOptions(options{})
	if _, ok := o.Cache.ByObject[&corev1.Secret{}]; ok {
		t.Error("the cache options configure an informer for Secrets")
	}
	for obj := range o.Cache.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			t.Error("the cache options configure an informer for Secrets")
		}
	}
	if o.Client.Cache == nil || !slices.ContainsFunc(o.Client.Cache.DisableFor, func(obj client.Object) bool {
		_, ok := obj.(*corev1.Secret)
		return ok
	}) {
		t.Error("the manager's client would read Secrets through the cache, starting an informer")
	}
}

// TestManagerRunsWithItsRole runs the whole manager as a user bound to exactly the generated
// ClusterRole: it must become ready (an informer on Secrets could not sync without list and
// watch) and authenticate bots by the token hash their slot records.
func TestManagerRunsWithItsRole(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	cfg := asUserWithRole(t, managerRole(t), "botpool-manager-"+ns)

	// A slot whose token the manager would have issued.
	token, err := slottoken.New()
	if err != nil {
		t.Fatal(err)
	}
	slot := bt.MakeSlot(ns, "pool-zoom-001", "absent").Obj()
	if err := env.Client.Create(ctx, slot); err != nil {
		t.Fatal(err)
	}
	slot.Status = v1.BotPoolSlotStatus{ApplicationUUID: "app-" + ns, TokenSHA256: slottoken.Hash([]byte(token))}
	if err := env.Client.Status().Update(ctx, slot); err != nil {
		t.Fatal(err)
	}

	probeAddr, botAPIAddr := kubetest.FreeLocalAddr(t), kubetest.FreeLocalAddr(t)
	o, err := parseFlags([]string{"--leader-elect=false", "--health-probe-bind-address=" + probeAddr,
		"--metrics-bind-address=0", "--bot-api-bind-address=" + botAPIAddr})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, cfg, o)
	waitReady(t, probeAddr)
	call := func(tok string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+botAPIAddr+"/v1/slots/app-"+ns+"/config", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		code, err := call(token)
		if err != nil {
			return fmt.Errorf("the slot's token: %w", err)
		}
		if code != http.StatusNotFound {
			return fmt.Errorf("the slot's token: %d; want 404 (no bot bound)", code)
		}
		return nil
	})
	if code, err := call("bpt_forged"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, %v; want 401", code, err)
	}
}
