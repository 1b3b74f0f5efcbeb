package controllers

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/kubetest"
)

var (
	env       *kubetest.Env
	connector = &fakeConnector{errs: map[string]error{}}
)

func TestMain(m *testing.M) {
	kubetest.Main(m, func(e *kubetest.Env) {
		env = e
		if err := startManager(e); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	})
}

// startManager runs the controllers under test against the envtest API server for the whole
// package; tests isolate themselves by namespace.
func startManager(e *kubetest.Env) error {
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:     e.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		return err
	}
	if err := SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	pools := &BotPoolReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Connector: connector,
		Clock: clock.RealClock{}, Recorder: events.NewFakeRecorder(1000), Metrics: NewMetrics(nil),
	}
	if err := pools.SetupWithManager(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// fakeConnector answers ForPool with a per-pool error, else a Coolify that knows its version.
type fakeConnector struct {
	mu   sync.Mutex
	errs map[string]error // by pool name
}

func (f *fakeConnector) ForPool(_ context.Context, pool *v1.BotPool) (coolify.API, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.errs[pool.Name]; err != nil {
		return nil, err
	}
	return fakeCoolify{}, nil
}

func (f *fakeConnector) fail(pool string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[pool] = err
}

// fakeCoolify implements what the pool controller calls; any other call panics, which a
// test would report.
type fakeCoolify struct{ coolify.API }

func (fakeCoolify) ServerVersion(context.Context) (string, error) { return "4.3.11", nil }

// Builders.

func newPool(ns, name string, mutate ...func(*v1.BotPool)) *v1.BotPool {
	p := &v1.BotPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.BotPoolSpec{
			Platform: v1.PlatformZoom,
			Image:    "ghcr.io/example/bot",
			Coolify: v1.CoolifyPlacement{
				CredentialsSecretRef: v1.SecretReference{Name: "coolify"},
				ProjectUUID:          "p1", ServerUUID: "s1", EnvironmentName: "production",
			},
		},
	}
	for _, f := range mutate {
		f(p)
	}
	return p
}

// queuedBot creates a Bot that waits in the queue of pool, as the bot controller leaves it.
func queuedBot(t *testing.T, ns, name, pool string) *v1.Bot {
	t.Helper()
	ctx := context.Background()
	b := &v1.Bot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.BotSpec{MeetingURL: "https://zoom.us/j/" + name}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status.Pool, b.Status.Phase = pool, v1.BotQueued
	if err := env.Client.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func listSlots(t *testing.T, ns string) []v1.BotPoolSlot {
	t.Helper()
	var l v1.BotPoolSlotList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}
