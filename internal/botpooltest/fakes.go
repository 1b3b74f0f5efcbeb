package botpooltest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/egress"
	"botpool.dev/botpool/store"
)

// Connector hands every pool the one Coolify API and remembers which pools it served, as
// the controllers' SecretConnector does. A is the controllers' narrow Coolify interface
// (controllers.CoolifyAPI): this package cannot import controllers, whose tests use it, and
// Go matches the Connector interface's return types exactly.
type Connector[A any] struct {
	API A

	mu     sync.Mutex
	served map[types.NamespacedName]bool
}

// ForPool implements the controllers' Connector.
func (c *Connector[A]) ForPool(_ context.Context, pool *v1.BotPool) (A, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.served == nil {
		c.served = map[types.NamespacedName]bool{}
	}
	c.served[types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}] = true
	return c.API, nil
}

// LastKnown implements the controllers' Connector: the API, for a pool it served.
func (c *Connector[A]) LastKnown(pool types.NamespacedName) A {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.served[pool] {
		return c.API
	}
	var none A
	return none
}

// DiscardEvents is an event recorder that drops every event, after the one check the real
// recorder makes first: it calls GetObjectKind on both objects, which panics on a typed nil
// (a nil *v1.Bot passed as the related object).
type DiscardEvents struct{}

// Eventf implements events.EventRecorder.
func (DiscardEvents) Eventf(regarding, related runtime.Object, _, _, _, _ string, _ ...any) {
	regarding.GetObjectKind()
	if related != nil {
		related.GetObjectKind()
	}
}

// AllowLoopback is an egress policy that lets callbacks and webhooks reach httptest servers,
// which the default policy refuses.
var AllowLoopback = egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// Events is an event recorder that keeps the type and reason ("Warning/StartRetried") of
// every event, for a test to look for one.
type Events struct {
	mu      sync.Mutex
	reasons []string
}

// Eventf implements events.EventRecorder.
func (e *Events) Eventf(_, _ runtime.Object, typ, reason, _, _ string, _ ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reasons = append(e.reasons, typ+"/"+reason)
}

// Reasons is every event's type and reason ("Normal/CapacityReserved"), in order.
func (e *Events) Reasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.reasons)
}

// Has reports whether an event of the type and reason ("Warning/CallbackFailed") was recorded.
func (e *Events) Has(typReason string) bool {
	return slices.Contains(e.Reasons(), typReason)
}

// Count counts the events recorded with the reason, of any type.
func (e *Events) Count(reason string) int {
	n := 0
	for _, r := range e.Reasons() {
		if strings.HasSuffix(r, "/"+reason) {
			n++
		}
	}
	return n
}

// NopLiveness is the Bot controller's store (bot.Liveness in controllers/bot) with no heartbeats,
// dropping every record.
type NopLiveness struct{}

// LastHeartbeats reports none.
func (NopLiveness) LastHeartbeats(context.Context, []types.UID) (map[types.UID]time.Time, error) {
	return nil, nil
}

// UpsertBot drops the record.
func (NopLiveness) UpsertBot(context.Context, store.BotRecord) error { return nil }

// AppendBotEvents drops the events.
func (NopLiveness) AppendBotEvents(context.Context, []store.BotEvent) error { return nil }

// DeleteKeepingImages is a DeleteApplicationFn that fails unless it is asked to keep the
// server's images (coolify.AppLeftovers): a Docker cleanup is server-wide, and would evict
// what every pool there pre-pulled.
func DeleteKeepingImages(_ context.Context, uuid string, opts coolify.DeleteOptions) error {
	if opts != coolify.AppLeftovers {
		return fmt.Errorf("application %s deleted with %+v, want coolify.AppLeftovers (no Docker cleanup)", uuid, opts)
	}
	return nil
}

// Coolify is a coolify.API of func fields: a test sets the methods it expects to be called.
// Every call is recorded in Calls (method and first argument) so a test can compare what a
// reconcile asked of Coolify; a method left unset fails the call with an error naming it, so an
// unexpected call shows in the test's diff instead of passing unnoticed.
type Coolify struct {
	ServerVersionFn                func(ctx context.Context) (string, error)
	ListServersFn                  func(ctx context.Context) ([]coolify.Server, error)
	ListProjectsFn                 func(ctx context.Context) ([]coolify.Project, error)
	ListEnvironmentsFn             func(ctx context.Context, projectUUID string) ([]coolify.Environment, error)
	ListServerDestinationsFn       func(ctx context.Context, serverUUID string) ([]coolify.Destination, error)
	GetServerDockerCleanupFn       func(ctx context.Context, serverUUID string) (*coolify.DockerCleanup, error)
	CreateDockerImageApplicationFn func(ctx context.Context, req coolify.CreateApplicationRequest) (string, error)
	GetApplicationFn               func(ctx context.Context, uuid string) (*coolify.Application, error)
	ListApplicationsFn             func(ctx context.Context, tag string) ([]coolify.Application, error)
	SetDescriptionFn               func(ctx context.Context, uuid, description string) error
	UpdateApplicationFn            func(ctx context.Context, uuid string, u coolify.AppUpdate) error
	DeleteApplicationFn            func(ctx context.Context, uuid string, opts coolify.DeleteOptions) error
	UpsertEnvsFn                   func(ctx context.Context, uuid string, envs []coolify.EnvVar) ([]coolify.EnvVar, error)
	CreateEnvFn                    func(ctx context.Context, uuid string, env coolify.EnvVar) (string, error)
	ListEnvsFn                     func(ctx context.Context, uuid string) ([]coolify.EnvVar, error)
	DeleteEnvFn                    func(ctx context.Context, appUUID, envUUID string) error
	DeployFn                       func(ctx context.Context, appUUID string) (coolify.DeployResult, error)
	StartFn                        func(ctx context.Context, uuid string) (coolify.DeployResult, error)
	RestartFn                      func(ctx context.Context, uuid string) (coolify.DeployResult, error)
	StopFn                         func(ctx context.Context, uuid string) error
	GetDeploymentFn                func(ctx context.Context, uuid string) (*coolify.Deployment, error)
	ListApplicationDeploymentsFn   func(ctx context.Context, appUUID string, skip, take int) (int, []coolify.Deployment, error)
	ListActiveDeploymentsFn        func(ctx context.Context) ([]coolify.Deployment, error)
	CancelDeploymentFn             func(ctx context.Context, uuid string) error

	mu    sync.Mutex
	calls []string
}

var _ coolify.API = (*Coolify)(nil)

// Calls returns the calls made so far, as "Method arg".
func (f *Coolify) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// call records a call and says whether its func is set; unset returns the error to give.
func (f *Coolify) call(method, arg string, set bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := method
	if arg != "" {
		name += " " + arg
	}
	f.calls = append(f.calls, name)
	if !set {
		return fmt.Errorf("botpooltest.Coolify: unexpected call %s", name)
	}
	return nil
}

func (f *Coolify) ServerVersion(ctx context.Context) (string, error) {
	if err := f.call("ServerVersion", "", f.ServerVersionFn != nil); err != nil {
		return "", err
	}
	return f.ServerVersionFn(ctx)
}

func (f *Coolify) ListServers(ctx context.Context) ([]coolify.Server, error) {
	if err := f.call("ListServers", "", f.ListServersFn != nil); err != nil {
		return nil, err
	}
	return f.ListServersFn(ctx)
}

func (f *Coolify) ListProjects(ctx context.Context) ([]coolify.Project, error) {
	if err := f.call("ListProjects", "", f.ListProjectsFn != nil); err != nil {
		return nil, err
	}
	return f.ListProjectsFn(ctx)
}

func (f *Coolify) ListEnvironments(ctx context.Context, projectUUID string) ([]coolify.Environment, error) {
	if err := f.call("ListEnvironments", projectUUID, f.ListEnvironmentsFn != nil); err != nil {
		return nil, err
	}
	return f.ListEnvironmentsFn(ctx, projectUUID)
}

func (f *Coolify) ListServerDestinations(ctx context.Context, serverUUID string) ([]coolify.Destination, error) {
	if err := f.call("ListServerDestinations", serverUUID, f.ListServerDestinationsFn != nil); err != nil {
		return nil, err
	}
	return f.ListServerDestinationsFn(ctx, serverUUID)
}

func (f *Coolify) GetServerDockerCleanup(ctx context.Context, serverUUID string) (*coolify.DockerCleanup, error) {
	if err := f.call("GetServerDockerCleanup", serverUUID, f.GetServerDockerCleanupFn != nil); err != nil {
		return nil, err
	}
	return f.GetServerDockerCleanupFn(ctx, serverUUID)
}

func (f *Coolify) CreateDockerImageApplication(ctx context.Context, req coolify.CreateApplicationRequest) (string, error) {
	if err := f.call("CreateDockerImageApplication", req.Name, f.CreateDockerImageApplicationFn != nil); err != nil {
		return "", err
	}
	return f.CreateDockerImageApplicationFn(ctx, req)
}

func (f *Coolify) GetApplication(ctx context.Context, uuid string) (*coolify.Application, error) {
	if err := f.call("GetApplication", uuid, f.GetApplicationFn != nil); err != nil {
		return nil, err
	}
	return f.GetApplicationFn(ctx, uuid)
}

func (f *Coolify) ListApplications(ctx context.Context, tag string) ([]coolify.Application, error) {
	if err := f.call("ListApplications", tag, f.ListApplicationsFn != nil); err != nil {
		return nil, err
	}
	return f.ListApplicationsFn(ctx, tag)
}

func (f *Coolify) SetDescription(ctx context.Context, uuid, description string) error {
	if err := f.call("SetDescription", uuid, f.SetDescriptionFn != nil); err != nil {
		return err
	}
	return f.SetDescriptionFn(ctx, uuid, description)
}

func (f *Coolify) UpdateApplication(ctx context.Context, uuid string, u coolify.AppUpdate) error {
	if err := f.call("UpdateApplication", uuid, f.UpdateApplicationFn != nil); err != nil {
		return err
	}
	return f.UpdateApplicationFn(ctx, uuid, u)
}

func (f *Coolify) DeleteEnv(ctx context.Context, appUUID, envUUID string) error {
	if err := f.call("DeleteEnv", appUUID, f.DeleteEnvFn != nil); err != nil {
		return err
	}
	return f.DeleteEnvFn(ctx, appUUID, envUUID)
}

func (f *Coolify) DeleteApplication(ctx context.Context, uuid string, opts coolify.DeleteOptions) error {
	if err := f.call("DeleteApplication", uuid, f.DeleteApplicationFn != nil); err != nil {
		return err
	}
	return f.DeleteApplicationFn(ctx, uuid, opts)
}

func (f *Coolify) UpsertEnvs(ctx context.Context, uuid string, envs []coolify.EnvVar) ([]coolify.EnvVar, error) {
	if err := f.call("UpsertEnvs", uuid, f.UpsertEnvsFn != nil); err != nil {
		return nil, err
	}
	return f.UpsertEnvsFn(ctx, uuid, envs)
}

func (f *Coolify) CreateEnv(ctx context.Context, uuid string, env coolify.EnvVar) (string, error) {
	if err := f.call("CreateEnv", uuid, f.CreateEnvFn != nil); err != nil {
		return "", err
	}
	return f.CreateEnvFn(ctx, uuid, env)
}

func (f *Coolify) ListEnvs(ctx context.Context, uuid string) ([]coolify.EnvVar, error) {
	if err := f.call("ListEnvs", uuid, f.ListEnvsFn != nil); err != nil {
		return nil, err
	}
	return f.ListEnvsFn(ctx, uuid)
}

func (f *Coolify) Deploy(ctx context.Context, appUUID string) (coolify.DeployResult, error) {
	if err := f.call("Deploy", appUUID, f.DeployFn != nil); err != nil {
		return coolify.DeployResult{}, err
	}
	return f.DeployFn(ctx, appUUID)
}

func (f *Coolify) Start(ctx context.Context, uuid string) (coolify.DeployResult, error) {
	if err := f.call("Start", uuid, f.StartFn != nil); err != nil {
		return coolify.DeployResult{}, err
	}
	return f.StartFn(ctx, uuid)
}

func (f *Coolify) Restart(ctx context.Context, uuid string) (coolify.DeployResult, error) {
	if err := f.call("Restart", uuid, f.RestartFn != nil); err != nil {
		return coolify.DeployResult{}, err
	}
	return f.RestartFn(ctx, uuid)
}

func (f *Coolify) Stop(ctx context.Context, uuid string) error {
	if err := f.call("Stop", uuid, f.StopFn != nil); err != nil {
		return err
	}
	return f.StopFn(ctx, uuid)
}

func (f *Coolify) GetDeployment(ctx context.Context, uuid string) (*coolify.Deployment, error) {
	if err := f.call("GetDeployment", uuid, f.GetDeploymentFn != nil); err != nil {
		return nil, err
	}
	return f.GetDeploymentFn(ctx, uuid)
}

func (f *Coolify) ListApplicationDeployments(ctx context.Context, appUUID string, skip, take int) (int, []coolify.Deployment, error) {
	if err := f.call("ListApplicationDeployments", appUUID, f.ListApplicationDeploymentsFn != nil); err != nil {
		return 0, nil, err
	}
	return f.ListApplicationDeploymentsFn(ctx, appUUID, skip, take)
}

func (f *Coolify) ListActiveDeployments(ctx context.Context) ([]coolify.Deployment, error) {
	if err := f.call("ListActiveDeployments", "", f.ListActiveDeploymentsFn != nil); err != nil {
		return nil, err
	}
	return f.ListActiveDeploymentsFn(ctx)
}

func (f *Coolify) CancelDeployment(ctx context.Context, uuid string) error {
	if err := f.call("CancelDeployment", uuid, f.CancelDeploymentFn != nil); err != nil {
		return err
	}
	return f.CancelDeploymentFn(ctx, uuid)
}
