package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

func TestParseFlagsWebhook(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.webhookURL != "" || o.webhookSecret != "" {
		t.Errorf("defaults: %+v, %v; want no webhook", o, err)
	}
	o, err = parseFlags([]string{"--webhook-url", "http://127.0.0.1:3000/hooks", "--webhook-secret", bt.WebhookKey}, io.Discard)
	if err != nil || o.webhookURL != "http://127.0.0.1:3000/hooks" || o.webhookSecret != bt.WebhookKey {
		t.Errorf("--webhook-url and --webhook-secret: %+v, %v", o, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--webhook-url", "127.0.0.1:3000/hooks"}, "--webhook-url"},
		{[]string{"--webhook-url", "ftp://127.0.0.1/hooks"}, "--webhook-url"},
		{[]string{"--webhook-url", "http:///hooks"}, "--webhook-url"},
		{[]string{"--webhook-secret", bt.WebhookKey}, "--webhook-secret needs --webhook-url"},
	} {
		if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%v): %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestManagerArgsWebhook: the operator of the demo reaches loopback with Bot callbacks and
// webhooks only when --webhook-url asks for it; Coolify's exception (the simulator listens on
// loopback) is there either way.
func TestManagerArgsWebhook(t *testing.T) {
	ports := managerPorts{botAPI: "127.0.0.1:1", metrics: "127.0.0.1:2", probes: "127.0.0.1:3"}
	callbacks := "--callback-allowed-cidrs=" + loopbackCIDRs
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	args := managerArgs(ports, "postgres://demo", o)
	if !slices.Contains(args, "--egress-allowed-cidrs="+loopbackCIDRs) {
		t.Errorf("default args %q: want the simulator's loopback exception", args)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--callback-") {
			t.Errorf("default args %q: want the operator's callback egress as is (loopback refused), got %s", args, a)
		}
	}
	o, err = parseFlags([]string{"--webhook-url", "http://localhost:3000/hooks"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if args := managerArgs(ports, "postgres://demo", o); !slices.Contains(args, callbacks) {
		t.Errorf("args with --webhook-url %q: want %s", args, callbacks)
	}
}

// TestPoolManifestWebhook: --webhook-url becomes the pool's webhookDefaults (every phase), and
// --webhook-secret a Secret opted in for signing that they name.
func TestPoolManifestWebhook(t *testing.T) {
	values := poolValues{CoolifyURL: "http://127.0.0.1:1", CoolifyToken: "t", ProjectUUID: "p", ServerUUID: "s",
		EnvironmentName: "production", Image: botImage, ImageTag: botImageTag, MaxSlots: 5, MinIdle: 2, Standby: "Stopped", Speed: 30}

	pool, secrets := decodePool(t, values)
	if pool.Spec.WebhookDefaults != nil || len(secrets) != 1 {
		t.Errorf("without --webhook-url: webhookDefaults %+v, %d Secrets; want none and the Coolify one", pool.Spec.WebhookDefaults, len(secrets))
	}

	values.WebhookURL = "http://127.0.0.1:3000/hooks?demo=1"
	pool, secrets = decodePool(t, values)
	if w := pool.Spec.WebhookDefaults; w == nil || w.URL != values.WebhookURL || w.Events != v1.WebhookEveryPhase || w.SecretRef != nil {
		t.Errorf("--webhook-url: webhookDefaults %+v, want %s, every phase, unsigned", w, values.WebhookURL)
	}
	if len(secrets) != 1 {
		t.Errorf("--webhook-url alone: %d Secrets, want the Coolify one", len(secrets))
	}

	values.WebhookSecret = bt.WebhookKey
	pool, secrets = decodePool(t, values)
	w := pool.Spec.WebhookDefaults
	if w == nil || w.SecretRef == nil || w.SecretRef.Name != "demo-webhook" || w.SecretRef.Key != "secret" {
		t.Fatalf("--webhook-secret: webhookDefaults %+v, want it signed with demo-webhook's key", w)
	}
	i := slices.IndexFunc(secrets, func(s *corev1.Secret) bool { return s.Name == "demo-webhook" })
	if i < 0 || secrets[i].StringData["secret"] != bt.WebhookKey || secrets[i].Labels[v1.LabelAllowWebhookSigning] != "true" {
		t.Errorf("--webhook-secret: Secrets %+v, want demo-webhook holding the key, opted in for signing", secrets)
	}
}

// decodePool renders manifests/pool.yaml and decodes its BotPool and Secrets.
func decodePool(t *testing.T, values poolValues) (*v1.BotPool, []*corev1.Secret) {
	t.Helper()
	doc, err := render(t.TempDir(), "pool", values)
	if err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(bt.Scheme()).UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(doc)))
	var pool *v1.BotPool
	var secrets []*corev1.Secret
	for {
		part, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(part))) == 0 {
			continue
		}
		obj, _, err := decoder.Decode(part, nil, nil)
		if err != nil {
			t.Fatalf("decoding %s: %v", part, err)
		}
		switch o := obj.(type) {
		case *v1.BotPool:
			pool = o
		case *corev1.Secret:
			secrets = append(secrets, o)
		}
	}
	if pool == nil {
		t.Fatalf("no BotPool in\n%s", doc)
	}
	return pool, secrets
}
