package pool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// pullPass is what one prePull did: what the scope says of each server's images afterwards,
// the Coolify calls, the requeue it asked for, whether it failed, and its events.
type pullPass struct {
	Servers []string // the servers s.images knows, sorted
	Cached  []string // srv-1's cached, "image@restartedAt pulledAt", newest first
	Pull    string   // srv-1's pull, "State image app dep restartedAt since"
	Calls   []string
	Requeue time.Duration
	Err     bool
	Events  []string
}

// TestPrePullInOnePass drives one prePull per row, on a pool of server srv-1 (or of the
// servers a row lists) with the status a row gives, against a func-field Coolify and the fake
// clock, and compares what the pass decided.
func TestPrePullInOnePass(t *testing.T) {
	const (
		ns, srv = "ns", "srv-1"
		app     = "app-pull"
		dep     = "dep-pull"
	)
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }
	poll := v1.DefaultDeploymentPollInterval
	tag := coolifyview.ClusterPoolTag("", ns, "pool")
	basePool := func() *v1.BotPool {
		return bt.MakePool(ns, "pool").MaxSlots(1).Image("bot", "v2").Placement("prj", srv, "production").Obj()
	}
	mark := coolifyview.OwnerMark(tag, basePool(), srv)
	puller := func(image, imageTag string) coolify.Application {
		return coolify.Application{UUID: app, Name: pullerName(srv), Description: coolifyview.Marked(pullerDescription, mark),
			DockerRegistryImageName: image, DockerRegistryImageTag: imageTag, Status: "exited:unhealthy"}
	}
	listing := func(apps ...coolify.Application) func(context.Context, string) ([]coolify.Application, error) {
		return func(context.Context, string) ([]coolify.Application, error) { return apps, nil }
	}
	deployment := func(status coolify.DeploymentStatus, logs ...string) func(context.Context, string) (*coolify.Deployment, error) {
		return func(_ context.Context, uuid string) (*coolify.Deployment, error) {
			d := &coolify.Deployment{DeploymentUUID: uuid, Status: status}
			if len(logs) > 0 {
				d.Logs = coolify.DeploymentLogs{Sent: true, Text: logs[0]}
			}
			return d, nil
		}
	}
	deployed := func(context.Context, string) (coolify.DeployResult, error) {
		return coolify.DeployResult{DeploymentUUID: dep}, nil
	}
	envs := func(_ context.Context, _ string, e []coolify.EnvVar) ([]coolify.EnvVar, error) { return e, nil }
	ok := func(context.Context, string) error { return nil }
	pulling := func(image string, since time.Duration) *v1.ImagePull {
		return &v1.ImagePull{Image: image, State: v1.ImagePulling, ApplicationUUID: app, DeploymentUUID: "dep-old", Since: at(since)}
	}
	failed := func(image string, since time.Duration) *v1.ImagePull {
		return &v1.ImagePull{Image: image, State: v1.ImagePullFailed, ApplicationUUID: app, DeploymentUUID: "dep-old", Since: at(since), Message: "earlier"}
	}
	cached := func(image string, age time.Duration) v1.CachedImage {
		return v1.CachedImage{Image: image, PulledAt: at(-age)}
	}
	// schedule answers the server's Docker cleanup settings with that frequency; unread, an
	// answer it cannot give.
	schedule := func(freq string) func(context.Context, string) (*coolify.DockerCleanup, error) {
		return func(context.Context, string) (*coolify.DockerCleanup, error) {
			return &coolify.DockerCleanup{Frequency: freq, Threshold: 80, Force: true}, nil
		}
	}
	unread := func(err error) func(context.Context, string) (*coolify.DockerCleanup, error) {
		return func(context.Context, string) (*coolify.DockerCleanup, error) { return nil, err }
	}
	readSchedule := "GetServerDockerCleanup " + srv
	started := "Pulling bot:v2 " + app + " " + dep + "  09:00:00"
	startCalls := []string{"ListApplications " + tag, "ListApplications " + tag, "UpsertEnvs " + app, "Deploy " + app}
	startEvents := []string{"Normal/" + v1.ReasonImagePullStarted}
	manifest := `[{"output":"Pulling image bot:v2","type":"stdout"},{"output":"Oops something is not okay, are you okay? 😢","type":"stderr"},` +
		`{"output":"Error response from daemon: manifest for bot:v2 not found: manifest unknown","type":"stderr"},` +
		`{"output":"Deployment failed. Removing the new version of your application.","type":"stdout"}]`

	tests := []struct {
		name    string
		pool    func(*v1.BotPool)
		images  map[string]*policy.ServerImages
		health  map[string]v1.ServerHealth
		noTmpl  bool
		polled  time.Duration // the pull's deployment was polled this long ago in this process
		coolify *bt.Coolify
		want    pullPass
		message string // a substring of srv-1's pull message
		// live is the pull srv-1's status records on the API server, past the cache.
		live *v1.ImagePull
	}{{
		name:    "cached, and no scheduled cleanup of the server since its pull: nothing to pull",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", time.Hour)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetServerDockerCleanupFn: schedule("0 0 * * *")},
		want:    pullPass{Cached: []string{"bot:v2@ 08:00:00"}, Calls: []string{"ListApplications " + tag, readSchedule}},
	}, {
		name:    "the server's scheduled cleanup ran since the pull (midnight): pulled again, and listed meanwhile",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", 10*time.Hour)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed, GetServerDockerCleanupFn: schedule("0 0 * * *")},
		want: pullPass{Cached: []string{"bot:v2@ 2026-01-14 23:00:00"}, Pull: started, Requeue: poll, Events: startEvents,
			Calls: append([]string{"ListApplications " + tag, readSchedule}, startCalls[1:]...)},
	}, {
		name:    "a schedule by Coolify's name for it (@hourly) ran since the pull: pulled again",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", 90*time.Minute)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed, GetServerDockerCleanupFn: schedule("@hourly")},
		want: pullPass{Cached: []string{"bot:v2@ 07:30:00"}, Pull: started, Requeue: poll, Events: startEvents,
			Calls: append([]string{"ListApplications " + tag, readSchedule}, startCalls[1:]...)},
	}, {
		name:    "a run due just now is given cleanupSettle to end before the pull is repeated",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", 30*time.Minute)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetServerDockerCleanupFn: schedule("hourly")},
		want:    pullPass{Cached: []string{"bot:v2@ 08:30:00"}, Calls: []string{"ListApplications " + tag, readSchedule}},
	}, {
		name:    "pulled 5 minutes ago: not repeated for a cleanup of every minute (minRePull), nor read",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", 5*time.Minute)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetServerDockerCleanupFn: schedule("every_minute")},
		want:    pullPass{Cached: []string{"bot:v2@ 08:55:00"}, Calls: []string{"ListApplications " + tag}},
	}, {
		name:    "the schedule cannot be read (a Coolify without the endpoint: 404): no pull before 24 hours, and the pass goes on",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", 10*time.Hour)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetServerDockerCleanupFn: unread(fmt.Errorf("%w: the path is unknown", coolify.ErrNotFound))},
		want:    pullPass{Cached: []string{"bot:v2@ 2026-01-14 23:00:00"}, Calls: []string{"ListApplications " + tag, readSchedule}},
	}, {
		name:    "the schedule cannot be read (Coolify fails): no pull before 24 hours, and the pass goes on",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", 10*time.Hour)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetServerDockerCleanupFn: unread(coolify.ErrServer)},
		want:    pullPass{Cached: []string{"bot:v2@ 2026-01-14 23:00:00"}, Calls: []string{"ListApplications " + tag, readSchedule}},
	}, {
		name:    "a frequency this operator cannot read: no pull before 24 hours",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", 10*time.Hour)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetServerDockerCleanupFn: schedule("0 0 L * *")},
		want:    pullPass{Cached: []string{"bot:v2@ 2026-01-14 23:00:00"}, Calls: []string{"ListApplications " + tag, readSchedule}},
	}, {
		name:    "the schedule unknown and the pull 24 hours old: pulled again, without reading the schedule",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", rePullAge)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed, GetServerDockerCleanupFn: unread(coolify.ErrNotFound)},
		want:    pullPass{Cached: []string{"bot:v2@ 2026-01-14 09:00:00"}, Pull: started, Requeue: poll, Events: startEvents, Calls: startCalls},
	}, {
		name: "a re-pull for a cleanup waits while another server's pull replaces an image",
		pool: func(p *v1.BotPool) {
			p.Spec.Coolify.ServerUUID, p.Spec.Coolify.Servers = "", []v1.PoolServer{{UUID: srv}, {UUID: "srv-2"}}
		},
		images: map[string]*policy.ServerImages{
			srv: {Cached: []v1.CachedImage{cached("bot:v2", 10*time.Hour)}},
			"srv-2": {Cached: []v1.CachedImage{cached("bot:v1", time.Hour)}, Pull: &v1.ImagePull{Image: "bot:v2", State: v1.ImagePulling,
				ApplicationUUID: "app-2", DeploymentUUID: "dep-2", Since: at(-time.Minute)}},
		},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetServerDockerCleanupFn: schedule("0 0 * * *"), GetDeploymentFn: deployment(coolify.DeploymentInProgress)},
		want: pullPass{Servers: []string{srv, "srv-2"}, Cached: []string{"bot:v2@ 2026-01-14 23:00:00"}, Requeue: poll,
			Calls: []string{"ListApplications " + tag, readSchedule, "GetDeployment dep-2"}},
	}, {
		name: "a re-pull for a cleanup starts in the pass another server's replacing pull ends",
		pool: func(p *v1.BotPool) {
			p.Spec.Coolify.ServerUUID, p.Spec.Coolify.Servers = "", []v1.PoolServer{{UUID: "srv-2"}, {UUID: srv}}
		},
		images: map[string]*policy.ServerImages{
			srv: {Cached: []v1.CachedImage{cached("bot:v2", 10*time.Hour)}},
			"srv-2": {Cached: []v1.CachedImage{cached("bot:v1", time.Hour)}, Pull: &v1.ImagePull{Image: "bot:v2", State: v1.ImagePulling,
				ApplicationUUID: "app-2", DeploymentUUID: "dep-2", Since: at(-time.Minute)}},
		},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed, StopFn: ok,
			GetServerDockerCleanupFn: schedule("0 0 * * *"), GetDeploymentFn: deployment(coolify.DeploymentFinished)},
		want: pullPass{Servers: []string{srv, "srv-2"}, Cached: []string{"bot:v2@ 2026-01-14 23:00:00"}, Pull: started, Requeue: poll,
			Events: []string{"Normal/" + v1.ReasonImagePulled, "Normal/" + v1.ReasonImagePullStarted},
			Calls:  append([]string{"ListApplications " + tag, "GetDeployment dep-2", "Stop app-2", readSchedule}, startCalls[1:]...)},
	}, {
		name: "not cached: the puller is created with the pull's env only, deployed, and the pull recorded",
		coolify: &bt.Coolify{
			ListApplicationsFn: listing(),
			CreateDockerImageApplicationFn: func(_ context.Context, req coolify.CreateApplicationRequest) (string, error) {
				want := coolify.CreateApplicationRequest{ProjectUUID: "prj", ServerUUID: srv, EnvironmentName: "production",
					Image: "bot", Tag: "v2", PortsExposes: "3000", Name: "botpool-pull-" + srv,
					Description: coolifyview.Marked(pullerDescription, mark), LimitsCPUs: "1", LimitsMemory: "2g", Tags: []string{tag}}
				if diff := cmp.Diff(want, req); diff != "" {
					return "", fmt.Errorf("create (-want +got):\n%s", diff)
				}
				return app, nil
			},
			UpsertEnvsFn: func(_ context.Context, _ string, e []coolify.EnvVar) ([]coolify.EnvVar, error) {
				if len(e) != 1 || e[0].Key != PrePullEnv || e[0].Value != "1" {
					return nil, fmt.Errorf("the puller's env is %+v, want only %s=1", e, PrePullEnv)
				}
				return e, nil
			},
			DeployFn: deployed,
		},
		pool: func(p *v1.BotPool) { p.Spec.Resources = v1.SlotResources{CPUs: "1", Memory: "2g"} },
		want: pullPass{Servers: []string{srv}, Pull: started, Requeue: poll, Events: startEvents,
			Calls: []string{"ListApplications " + tag, "ListApplications " + tag, "CreateDockerImageApplication botpool-pull-" + srv, "UpsertEnvs " + app, "Deploy " + app}},
	}, {
		name:    "the puller exists (a crash between its create and the record): adopted, not doubled",
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed},
		want:    pullPass{Pull: started, Requeue: poll, Events: startEvents, Calls: startCalls},
	}, {
		name: "a same-named application without the pool's owner mark is not adopted",
		coolify: &bt.Coolify{
			ListApplicationsFn: listing(coolify.Application{UUID: "foreign", Name: pullerName(srv), Description: "someone else's",
				DockerRegistryImageName: "bot", DockerRegistryImageTag: "v2"}),
			CreateDockerImageApplicationFn: func(context.Context, coolify.CreateApplicationRequest) (string, error) { return app, nil },
			UpsertEnvsFn:                   envs, DeployFn: deployed,
		},
		want: pullPass{Pull: started, Requeue: poll, Events: startEvents,
			Calls: []string{"ListApplications " + tag, "ListApplications " + tag, "CreateDockerImageApplication botpool-pull-" + srv, "UpsertEnvs " + app, "Deploy " + app}},
	}, {
		name: "the puller has another image: it is given the template's before the deploy",
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v1")), UpsertEnvsFn: envs, DeployFn: deployed,
			UpdateApplicationFn: func(_ context.Context, _ string, u coolify.AppUpdate) error {
				if u != (coolify.AppUpdate{Image: "bot", Tag: "v2"}) {
					return fmt.Errorf("update %+v, want image bot tag v2 only", u)
				}
				return nil
			}},
		want: pullPass{Pull: started, Requeue: poll, Events: startEvents,
			Calls: []string{"ListApplications " + tag, "ListApplications " + tag, "UpsertEnvs " + app, "UpdateApplication " + app, "Deploy " + app}},
	}, {
		name: "a de-duplicated deploy: the puller's newest deployment is the pull",
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs,
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) { return coolify.DeployResult{}, nil },
			ListApplicationDeploymentsFn: func(context.Context, string, int, int) (int, []coolify.Deployment, error) {
				return 1, []coolify.Deployment{{DeploymentUUID: dep, Status: coolify.DeploymentQueued}}, nil
			}},
		want: pullPass{Pull: started, Requeue: poll, Events: startEvents, Calls: append(startCalls[:4:4], "ListApplicationDeployments "+app)},
	}, {
		// Seed 4 of the model check: a deploy Coolify carried out but answered 500 left a
		// deployment that began its pull before a push of the tag (a restartedAt); recorded as
		// the pull of that push, it put the tag's old image in cached, and a slot pulled cold.
		name: "a de-duplicated deploy of a deployment in progress: it may pull an earlier image, so it is cancelled and nothing recorded",
		pool: func(p *v1.BotPool) { p.Annotations = map[string]string{v1.AnnotationRestartedAt: "pushed"} },
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, CancelDeploymentFn: ok,
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) { return coolify.DeployResult{}, nil },
			ListApplicationDeploymentsFn: func(context.Context, string, int, int) (int, []coolify.Deployment, error) {
				return 1, []coolify.Deployment{{DeploymentUUID: "dep-earlier", Status: coolify.DeploymentInProgress}}, nil
			}},
		want: pullPass{Requeue: poll, Calls: append(startCalls[:4:4], "ListApplicationDeployments "+app, "CancelDeployment dep-earlier")},
	}, {
		// Under load: a pass recorded the pull, and the next one, on a cache without that
		// write, deployed again; cancelling the deployment would fail the recorded pull.
		name: "a de-duplicated deploy of the pull the status already records, past the cache: kept, not cancelled",
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs,
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) { return coolify.DeployResult{}, nil },
			ListApplicationDeploymentsFn: func(context.Context, string, int, int) (int, []coolify.Deployment, error) {
				return 1, []coolify.Deployment{{DeploymentUUID: dep, Status: coolify.DeploymentInProgress}}, nil
			}},
		live: &v1.ImagePull{Image: "bot:v2", State: v1.ImagePulling, ApplicationUUID: app, DeploymentUUID: dep, Since: at(-time.Minute)},
		want: pullPass{Pull: "Pulling bot:v2 " + app + " " + dep + "  08:59:00", Requeue: poll, Calls: append(startCalls[:4:4], "ListApplicationDeployments "+app)},
	}, {
		name: "a de-duplicated deploy whose look-up fails: nothing recorded, the pass fails",
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs,
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) { return coolify.DeployResult{}, nil },
			ListApplicationDeploymentsFn: func(context.Context, string, int, int) (int, []coolify.Deployment, error) {
				return 0, nil, coolify.ErrServer
			}},
		want: pullPass{Err: true, Calls: append(startCalls[:4:4], "ListApplicationDeployments "+app)},
	}, {
		name:    "finished: the puller is stopped and the image listed first, replacing its older entry",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v1", time.Hour), cached("bot:v2", 30*time.Hour)}, Pull: pulling("bot:v2", -5*time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), GetDeploymentFn: deployment(coolify.DeploymentFinished), StopFn: ok},
		want: pullPass{Cached: []string{"bot:v2@ 09:00:00", "bot:v1@ 08:00:00"}, Events: []string{"Normal/" + v1.ReasonImagePulled},
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old", "Stop " + app}},
	}, {
		name:    "finished: at most three images are listed",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v1", time.Hour), cached("bot:v0", 2*time.Hour), cached("bot:v-1", 3*time.Hour)}, Pull: pulling("bot:v2", -5*time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentFinished), StopFn: ok},
		want: pullPass{Cached: []string{"bot:v2@ 09:00:00", "bot:v1@ 08:00:00", "bot:v0@ 07:00:00"}, Events: []string{"Normal/" + v1.ReasonImagePulled},
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old", "Stop " + app}},
	}, {
		name:   "finished, but the stop fails: still Pulling, and the next pass stops again",
		images: map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -5*time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentFinished),
			StopFn: func(context.Context, string) error { return coolify.ErrServer }},
		want: pullPass{Pull: "Pulling bot:v2 " + app + " dep-old  08:55:00", Err: true,
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old", "Stop " + app}},
	}, {
		name:    "failed: Failed with Coolify's error line, retried after pullRetry",
		images:  map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentFailed, manifest)},
		want: pullPass{Pull: "Failed bot:v2 " + app + " dep-old  09:00:00", Requeue: policy.PullRetry, Events: []string{"Warning/" + v1.ReasonImagePullFailed},
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old"}},
		message: "Pulling bot:v2 on server srv-1 failed: Error response from daemon: manifest for bot:v2 not found: manifest unknown",
	}, {
		name:    "failed, and the token may not read the log: the message says why there is no reason",
		images:  map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentFailed)},
		want: pullPass{Pull: "Failed bot:v2 " + app + " dep-old  09:00:00", Requeue: policy.PullRetry, Events: []string{"Warning/" + v1.ReasonImagePullFailed},
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old"}},
		message: "deployment dep-old is failed; its log is hidden, since the pool's Coolify token lacks the read:sensitive ability",
	}, {
		name:    "cancelled by someone in Coolify: Failed",
		images:  map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentCancelled, "[]")},
		want: pullPass{Pull: "Failed bot:v2 " + app + " dep-old  09:00:00", Requeue: policy.PullRetry, Events: []string{"Warning/" + v1.ReasonImagePullFailed},
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old"}},
		message: "deployment dep-old was cancelled",
	}, {
		name:    "failed a minute ago: not retried before pullRetry",
		images:  map[string]*policy.ServerImages{srv: {Pull: failed("bot:v2", -time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Pull: "Failed bot:v2 " + app + " dep-old  08:59:00", Requeue: time.Minute, Calls: []string{"ListApplications " + tag}},
	}, {
		name: "failed three times in a row, five minutes ago: not retried before 8 minutes",
		images: map[string]*policy.ServerImages{srv: {Pull: func() *v1.ImagePull {
			p := failed("bot:v2", -5*time.Minute)
			p.Failures = 3
			return p
		}()}},
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Pull: "Failed bot:v2 " + app + " dep-old  08:55:00", Requeue: 3 * time.Minute, Calls: []string{"ListApplications " + tag}},
	}, {
		name: "failed three times in a row, five minutes ago, a standby pool with no other image there: retried after pullRetry",
		pool: func(p *v1.BotPool) { p.Spec.Standby = v1.StandbyRunning },
		images: map[string]*policy.ServerImages{srv: {Pull: func() *v1.ImagePull {
			p := failed("bot:v2", -time.Minute)
			p.Failures = 3
			return p
		}()}},
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Pull: "Failed bot:v2 " + app + " dep-old  08:59:00", Requeue: time.Minute, Calls: []string{"ListApplications " + tag}},
	}, {
		name: "failed three times in a row, a standby pool with an older image there: the longer wait",
		pool: func(p *v1.BotPool) { p.Spec.Standby = v1.StandbyRunning },
		images: map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v1", time.Hour)}, Pull: func() *v1.ImagePull {
			p := failed("bot:v2", -time.Minute)
			p.Failures = 3
			return p
		}()}},
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want: pullPass{Cached: []string{"bot:v1@ 08:00:00"}, Pull: "Failed bot:v2 " + app + " dep-old  08:59:00", Requeue: 7 * time.Minute,
			Calls: []string{"ListApplications " + tag}},
	}, {
		name:    "failed pullRetry ago: pulled again",
		images:  map[string]*policy.ServerImages{srv: {Pull: failed("bot:v2", -policy.PullRetry)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed},
		want:    pullPass{Pull: started, Requeue: poll, Events: startEvents, Calls: startCalls},
	}, {
		name:    "a failed pull of another image (the template changed): the new one is pulled at once",
		images:  map[string]*policy.ServerImages{srv: {Pull: failed("bot:bad", -10*time.Second)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "bad")), UpsertEnvsFn: envs, DeployFn: deployed, UpdateApplicationFn: func(context.Context, string, coolify.AppUpdate) error { return nil }},
		want: pullPass{Pull: started, Requeue: poll, Events: startEvents,
			Calls: []string{"ListApplications " + tag, "ListApplications " + tag, "UpsertEnvs " + app, "UpdateApplication " + app, "Deploy " + app}},
	}, {
		name:    "a failed pull under another restartedAt: pulled at once",
		pool:    func(p *v1.BotPool) { p.Annotations = map[string]string{v1.AnnotationRestartedAt: "b"} },
		images:  map[string]*policy.ServerImages{srv: {Pull: &v1.ImagePull{Image: "bot:v2", State: v1.ImagePullFailed, ApplicationUUID: app, RestartedAt: "a", Since: at(-10 * time.Second)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed},
		want:    pullPass{Pull: "Pulling bot:v2 " + app + " " + dep + " b 09:00:00", Requeue: poll, Events: startEvents, Calls: startCalls},
	}, {
		name:    "a new restartedAt: the cached image is pulled again",
		pool:    func(p *v1.BotPool) { p.Annotations = map[string]string{v1.AnnotationRestartedAt: "b"} },
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{{Image: "bot:v2", PulledAt: at(-time.Hour), RestartedAt: "a"}}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed},
		want: pullPass{Cached: []string{"bot:v2@a 08:00:00"}, Pull: "Pulling bot:v2 " + app + " " + dep + " b 09:00:00", Requeue: poll,
			Events: startEvents, Calls: startCalls},
	}, {
		name:   "a pull of another image in flight (the template changed): cancelled, and the new one starts",
		images: map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v1", -time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v1")), UpsertEnvsFn: envs, DeployFn: deployed,
			CancelDeploymentFn: ok, UpdateApplicationFn: func(context.Context, string, coolify.AppUpdate) error { return nil }},
		want: pullPass{Pull: started, Requeue: poll, Events: startEvents,
			Calls: []string{"ListApplications " + tag, "CancelDeployment dep-old", "ListApplications " + tag, "UpsertEnvs " + app, "UpdateApplication " + app, "Deploy " + app}},
	}, {
		name:    "pulled a day ago: pulled again, and listed meanwhile",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", rePullAge)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed},
		want:    pullPass{Cached: []string{"bot:v2@ 2026-01-14 09:00:00"}, Pull: started, Requeue: poll, Events: startEvents, Calls: startCalls},
	}, {
		name:    "in flight: followed, and the pool looks again at the poll interval",
		images:  map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentInProgress)},
		want:    pullPass{Pull: "Pulling bot:v2 " + app + " dep-old  08:59:00", Requeue: poll, Calls: []string{"ListApplications " + tag, "GetDeployment dep-old"}},
	}, {
		name:    "in flight and polled 5 s ago: no request before the poll interval",
		images:  map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -time.Minute)}},
		polled:  5 * time.Second,
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Pull: "Pulling bot:v2 " + app + " dep-old  08:59:00", Requeue: poll - 5*time.Second, Calls: []string{"ListApplications " + tag}},
	}, {
		name:    "in flight past deploymentTimeout: cancelled and Failed",
		images:  map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -v1.DefaultDeploymentTimeout)}},
		polled:  time.Second, // the timeout is kept whatever the poll
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentInProgress), CancelDeploymentFn: ok},
		want: pullPass{Pull: "Failed bot:v2 " + app + " dep-old  09:00:00", Requeue: policy.PullRetry, Events: []string{"Warning/" + v1.ReasonImagePullFailed},
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old", "CancelDeployment dep-old"}},
		message: "did not finish within the pool's deploymentTimeout 25m0s (deployment dep-old cancelled)",
	}, {
		name:   "Coolify lost the deployment (404): pulled again",
		images: map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(puller("bot", "v2")), UpsertEnvsFn: envs, DeployFn: deployed,
			GetDeploymentFn: func(context.Context, string) (*coolify.Deployment, error) { return nil, coolify.ErrNotFound }},
		want: pullPass{Pull: started, Requeue: poll, Events: startEvents,
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old", "ListApplications " + tag, "UpsertEnvs " + app, "Deploy " + app}},
	}, {
		name:    "a cordoned server gets no pull",
		pool:    func(p *v1.BotPool) { cordon(p, srv) },
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Servers: []string{srv}, Calls: []string{"ListApplications " + tag}},
	}, {
		name:    "a cordoned server's pull in flight is followed to its end",
		pool:    func(p *v1.BotPool) { cordon(p, srv) },
		images:  map[string]*policy.ServerImages{srv: {Pull: pulling("bot:v2", -5*time.Minute)}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentFinished), StopFn: ok},
		want: pullPass{Cached: []string{"bot:v2@ 09:00:00"}, Events: []string{"Normal/" + v1.ReasonImagePulled},
			Calls: []string{"ListApplications " + tag, "GetDeployment dep-old", "Stop " + app}},
	}, {
		// The model check's seed 2574853505207255: recorded, the pull of the old push stayed in
		// cached once the pool moved to another tag, and a new slot was created on it.
		name: "a cordoned server's pull under an earlier restartedAt ends: followed and stopped, not recorded",
		pool: func(p *v1.BotPool) {
			cordon(p, srv)
			p.Annotations = map[string]string{v1.AnnotationRestartedAt: "b"}
		},
		images: map[string]*policy.ServerImages{srv: {Pull: func() *v1.ImagePull {
			p := pulling("bot:v2", -5*time.Minute)
			p.RestartedAt = "a"
			return p
		}()}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(), GetDeploymentFn: deployment(coolify.DeploymentFinished), StopFn: ok},
		want:    pullPass{Servers: []string{srv}, Calls: []string{"ListApplications " + tag, "GetDeployment dep-old", "Stop " + app}},
	}, {
		name:    "a server Coolify reports unreachable gets no pull",
		health:  map[string]v1.ServerHealth{srv: v1.ServerUnreachable},
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Servers: []string{srv}, Calls: []string{"ListApplications " + tag}},
	}, {
		name:    "a pull of an unreachable server's status is not retried while it is out",
		images:  map[string]*policy.ServerImages{srv: {Pull: failed("bot:v2", -time.Hour)}},
		pool:    func(p *v1.BotPool) { p.Status.Servers = []v1.ServerStatus{{UUID: srv, Health: v1.ServerUnusable}} },
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Pull: "Failed bot:v2 " + app + " dep-old  08:00:00", Calls: []string{"ListApplications " + tag}},
	}, {
		name:   "a puller whose container still runs after its pull (Coolify lost the stop) is stopped again",
		images: map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", policy.StrayAfter)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(func() coolify.Application {
			a := puller("bot", "v2")
			a.Status = "running:unknown"
			return a
		}()), StopFn: ok},
		want: pullPass{Cached: []string{"bot:v2@ 08:58:00"}, Calls: []string{"ListApplications " + tag, "Stop " + app}},
	}, {
		name:    "a puller that runs a moment after its pull is left to the stop on its way",
		images:  map[string]*policy.ServerImages{srv: {Cached: []v1.CachedImage{cached("bot:v2", time.Minute)}}},
		coolify: &bt.Coolify{ListApplicationsFn: listing(coolify.Application{UUID: app, Name: pullerName(srv), Description: coolifyview.Marked(pullerDescription, mark), Status: "running:unknown"})},
		want:    pullPass{Cached: []string{"bot:v2@ 08:59:00"}, Calls: []string{"ListApplications " + tag}},
	}, {
		name:    "the template cannot be read: no pull starts",
		noTmpl:  true,
		coolify: &bt.Coolify{ListApplicationsFn: listing()},
		want:    pullPass{Servers: []string{srv}, Calls: []string{"ListApplications " + tag}},
	}, {
		name: "a server no longer listed: its puller (recorded, or found by name) is deleted, its images forgotten",
		images: map[string]*policy.ServerImages{
			srv:   {Cached: []v1.CachedImage{cached("bot:v2", time.Hour)}},
			"old": {Cached: []v1.CachedImage{cached("bot:v2", time.Hour)}, Pull: &v1.ImagePull{Image: "bot:v2", State: v1.ImagePulling, ApplicationUUID: "app-old", DeploymentUUID: "dep-old", Since: at(-time.Minute)}},
		},
		coolify: &bt.Coolify{
			ListApplicationsFn: listing(puller("bot", "v2"), coolify.Application{UUID: "app-gone", Name: pullerName("gone"), Description: coolifyview.Marked(pullerDescription, coolifyview.OwnerMark(tag, basePool(), "gone"))}),
			CancelDeploymentFn: ok, StopFn: ok, DeleteApplicationFn: bt.DeleteKeepingImages, GetServerDockerCleanupFn: schedule("0 0 * * *"),
			ListApplicationDeploymentsFn: func(context.Context, string, int, int) (int, []coolify.Deployment, error) {
				return 1, []coolify.Deployment{{DeploymentUUID: "dep-gone", Status: coolify.DeploymentFinished}}, nil
			},
		},
		want: pullPass{Servers: []string{srv}, Cached: []string{"bot:v2@ 08:00:00"}, Calls: []string{
			"CancelDeployment dep-old", "Stop app-old", "DeleteApplication app-old",
			"ListApplications " + tag, "ListApplicationDeployments app-gone", "Stop app-gone", "DeleteApplication app-gone", readSchedule}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(now)
			pool := basePool()
			if tt.pool != nil {
				tt.pool(pool)
			}
			events := &bt.Events{}
			live := pool.DeepCopy()
			if tt.live != nil {
				live.Status.Servers = []v1.ServerStatus{{UUID: srv, Pull: tt.live}}
			}
			r := &Reconciler{Clock: clk, Recorder: events, Coolify: &coolifyview.BulkReader{Clock: clk}, APIReader: fakeapi.New(t, interceptor.Funcs{}, live)}
			s := &poolScope{pool: pool, api: tt.coolify, images: tt.images, health: tt.health}
			if s.images == nil {
				s.images = map[string]*policy.ServerImages{}
			}
			if !tt.noTmpl {
				tmpl := policy.PoolTemplate(pool, "", "http://botapi")
				s.template = &tmpl
			}
			if p := s.images[srv]; p != nil && p.Pull != nil && tt.polled > 0 {
				r.pullPolls.mark(p.Pull.DeploymentUUID, now.Add(-tt.polled))
			}
			err := r.prePull(context.Background(), s)
			got := pullPass{Calls: tt.coolify.Calls(), Requeue: s.requeue, Err: err != nil, Events: events.Reasons()}
			for k := range s.images {
				got.Servers = append(got.Servers, k)
			}
			slices.Sort(got.Servers)
			if tt.want.Servers == nil {
				tt.want.Servers = []string{srv}
			}
			var msg string
			if im := s.images[srv]; im != nil {
				for _, c := range im.Cached {
					got.Cached = append(got.Cached, c.Image+"@"+c.RestartedAt+" "+clockOf(c.PulledAt.Time, now))
				}
				if p := im.Pull; p != nil {
					got.Pull = fmt.Sprintf("%s %s %s %s %s %s", p.State, p.Image, p.ApplicationUUID, p.DeploymentUUID, p.RestartedAt, clockOf(p.Since.Time, now))
					msg = p.Message
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("one prePull (-want +got):\n%s\nerror: %v", diff, err)
			}
			if !strings.Contains(msg, tt.message) {
				t.Errorf("pull message %q, want it to say %q", msg, tt.message)
			}
		})
	}
}

// cordon cordons one of the pool's servers (its lone serverUUID becomes a list of one).
func cordon(p *v1.BotPool, server string) {
	servers := p.Spec.Coolify.ServerList()
	p.Spec.Coolify.ServerUUID = ""
	for i := range servers {
		if servers[i].UUID == server {
			servers[i].Cordoned = true
		}
	}
	p.Spec.Coolify.Servers = servers
}

// clockOf shows t as a time of day, with the date when it is not now's day.
func clockOf(t, now time.Time) string {
	if t.YearDay() != now.YearDay() {
		return t.Format("2006-01-02 15:04:05")
	}
	return t.Format("15:04:05")
}

// TestPrePullEnvMatchesTheSDK: the variable the operator gives a puller is the one the bot SDK
// tells an image to exit on.
func TestPrePullEnvMatchesTheSDK(t *testing.T) {
	if PrePullEnv != botclient.PrePullEnv {
		t.Fatalf("the operator sets %s, the SDK reads %s", PrePullEnv, botclient.PrePullEnv)
	}
}

// TestPoolPassKeepsThePullsRequeue: a whole pool pass whose pull is in flight asks to be
// looked at again at the poll interval, not at the pass's slower timers (health, orphans),
// and writes what it learnt of the pull into status.servers.
func TestPoolPassKeepsThePullsRequeue(t *testing.T) {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	pool := bt.MakePool("ns", "pool").MaxSlots(1).Image("bot", "v2").Placement("prj", "srv-1", "production").Obj()
	pool.Finalizers = []string{v1.FinalizerPool}
	pool.Status.Servers = []v1.ServerStatus{{UUID: "srv-1", State: v1.ServerActive, Pull: &v1.ImagePull{
		Image: "bot:v2", State: v1.ImagePulling, ApplicationUUID: "app-pull", DeploymentUUID: "dep-pull", Since: metav1.NewTime(now.Add(-time.Minute))}}}
	status := coolify.DeploymentInProgress
	api := &bt.Coolify{
		ServerVersionFn:    func(context.Context) (string, error) { return "4.3.0", nil },
		ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) { return nil, nil },
		GetDeploymentFn: func(_ context.Context, uuid string) (*coolify.Deployment, error) {
			return &coolify.Deployment{DeploymentUUID: uuid, Status: status}, nil
		},
		StopFn: func(context.Context, string) error { return nil },
	}
	c := fakeapi.New(t, interceptor.Funcs{}, pool)
	r := &Reconciler{Client: c, APIReader: c, Connector: &bt.Connector[coolifyview.CoolifyAPI]{API: api}, Coolify: &coolifyview.BulkReader{Clock: clk},
		Clock: clk, Recorder: bt.DiscardEvents{}, Metrics: metrics.New(nil), OrphanCheck: time.Minute}
	key := client.ObjectKeyFromObject(pool)
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != v1.DefaultDeploymentPollInterval {
		t.Fatalf("a pass with a pull in flight = %+v, %v; want a requeue after the poll interval %s", res, err, v1.DefaultDeploymentPollInterval)
	}

	status = coolify.DeploymentFinished
	clk.Step(v1.DefaultDeploymentPollInterval)
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	stored := &v1.BotPool{}
	if err := c.Get(context.Background(), key, stored); err != nil {
		t.Fatal(err)
	}
	st := stored.Status.Servers
	if len(st) != 1 || st[0].Pull != nil || len(st[0].Cached) != 1 || st[0].Cached[0].Image != "bot:v2" || !st[0].Cached[0].PulledAt.Time.Equal(clk.Now()) {
		t.Fatalf("status.servers after the pull finished: %+v", st)
	}
	// What the slots read of it (images.go): the server may give a slot the template.
	tmpl := policy.PoolTemplate(stored, "", "")
	if image, tag := policy.SplitRef(stored.Status.TemplateImage); image != "bot" || tag != "v2" {
		t.Errorf("status.templateImage %q", stored.Status.TemplateImage)
	}
	if !policy.CachedOn(stored, "srv-1", "bot:v2", "") || policy.NewestCached(stored, "srv-1") != "bot:v2" || !policy.TemplateReady(stored, "srv-1", tmpl) {
		t.Errorf("after the pull, cachedOn %v, newestCached %q, templateReady %v; want the template's image ready on srv-1",
			policy.CachedOn(stored, "srv-1", "bot:v2", ""), policy.NewestCached(stored, "srv-1"), policy.TemplateReady(stored, "srv-1", tmpl))
	}
}

// TestOrphanSweepLeavesPullersAlone: the orphan sweep deletes a stopped application of the
// pool's tag with a slot's name and no slot, never the pool's puller, stopped and tagged as it
// is.
func TestOrphanSweepLeavesPullersAlone(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("ns", "pool").MaxSlots(2).Image("bot", "v2").Placement("prj", "srv-1", "production").Obj()
	tag := coolifyview.ClusterPoolTag("", "ns", "pool")
	mark := coolifyview.OwnerMark(tag, pool, "srv-1")
	api := &bt.Coolify{
		ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
			return []coolify.Application{
				{UUID: "app-pull", Name: pullerName("srv-1"), Description: coolifyview.Marked(pullerDescription, mark), Status: "exited:unhealthy"},
				{UUID: "app-orphan", Name: "pool-zoom-002", Description: coolifyview.Marked("[IDLE] Available - never used", mark), Status: "exited:unhealthy"},
			}, nil
		},
		StopFn:              func(context.Context, string) error { return nil },
		DeleteApplicationFn: bt.DeleteKeepingImages,
	}
	c := fakeapi.New(t, interceptor.Funcs{}, pool)
	r := &Reconciler{Client: c, APIReader: c, Coolify: &coolifyview.BulkReader{Clock: clk}, Clock: clk, Recorder: bt.DiscardEvents{}}
	if err := r.deleteOrphanApps(context.Background(), &poolScope{pool: pool, api: api}); err != nil {
		t.Fatal(err)
	}
	want := []string{"ListApplications " + tag, "Stop app-orphan", "DeleteApplication app-orphan"}
	if diff := cmp.Diff(want, api.Calls()); diff != "" {
		t.Fatalf("the orphan sweep's calls (-want +got):\n%s", diff)
	}
}

// TestPoolDeletionDeletesPullers: a deleted pool whose slots are gone deletes its pullers (the
// one its status names, with its pull in flight cancelled, and one only a list finds) before
// its finalizer goes; without a Coolify client it waits when its status shows a pre-pull, and
// goes when none.
func TestPoolDeletionDeletesPullers(t *testing.T) {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	tag := coolifyview.ClusterPoolTag("", "ns", "pool")
	deleted := func(pulls bool) *v1.BotPool {
		pool := bt.MakePool("ns", "pool").MaxSlots(1).Image("bot", "v2").Servers("srv-1", "srv-2").Obj()
		pool.Spec.Coolify.ProjectUUID = "prj"
		pool.Finalizers = []string{v1.FinalizerPool}
		pool.DeletionTimestamp = &metav1.Time{Time: now}
		if pulls {
			pool.Status.Servers = []v1.ServerStatus{{UUID: "srv-1", Pull: &v1.ImagePull{Image: "bot:v2", State: v1.ImagePulling,
				ApplicationUUID: "app-1", DeploymentUUID: "dep-1", Since: metav1.NewTime(now)}}}
		}
		return pool
	}
	mark2 := coolifyview.OwnerMark(tag, deleted(false), "srv-2")
	api := &bt.Coolify{
		ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
			return []coolify.Application{{UUID: "app-2", Name: pullerName("srv-2"), Description: coolifyview.Marked(pullerDescription, mark2)},
				{UUID: "app-x", Name: pullerName("srv-2"), Description: "not the pool's"}}, nil
		},
		ListApplicationDeploymentsFn: func(context.Context, string, int, int) (int, []coolify.Deployment, error) { return 0, nil, nil },
		CancelDeploymentFn:           func(context.Context, string) error { return nil },
		StopFn:                       func(context.Context, string) error { return nil },
		DeleteApplicationFn:          bt.DeleteKeepingImages,
	}
	for _, tt := range []struct {
		name      string
		connector coolifyview.Connector
		pulls     bool
		wantGone  bool
		wantCalls []string
	}{{
		name: "with Coolify", connector: &bt.Connector[coolifyview.CoolifyAPI]{API: api}, pulls: true, wantGone: true,
		wantCalls: []string{"ListApplications " + tag, "CancelDeployment dep-1", "Stop app-1", "DeleteApplication app-1",
			"ListApplicationDeployments app-2", "Stop app-2", "DeleteApplication app-2"},
	}, {
		name: "without Coolify, after pre-pulls: waits", connector: noCoolify{}, pulls: true,
	}, {
		name: "without Coolify, never pulled: goes", connector: noCoolify{}, wantGone: true,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(api.Calls())
			pool := deleted(tt.pulls)
			c := fakeapi.New(t, interceptor.Funcs{}, pool)
			r := &Reconciler{Client: c, APIReader: c, Connector: tt.connector, Coolify: &coolifyview.BulkReader{Clock: clk},
				Clock: clk, Recorder: bt.DiscardEvents{}, Metrics: metrics.New(nil)}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
			if err != nil {
				t.Fatal(err)
			}
			gone := apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKeyFromObject(pool), &v1.BotPool{}))
			if gone != tt.wantGone || !gone && res.RequeueAfter != pass.StalledRetry {
				t.Fatalf("pool gone %v (requeue %s), want gone %v", gone, res.RequeueAfter, tt.wantGone)
			}
			if diff := cmp.Diff(tt.wantCalls, api.Calls()[before:], cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// noCoolify is a connector that has no client for any pool (its credentials are gone, and this
// process never served it).
type noCoolify struct{}

func (noCoolify) ForPool(context.Context, *v1.BotPool) (coolifyview.CoolifyAPI, error) {
	return nil, fmt.Errorf("%w: coolify", coolifyview.ErrCredentialsNotFound)
}
func (noCoolify) LastKnown(types.NamespacedName) coolifyview.CoolifyAPI { return nil }

// TestPrePullReplacesOneServerAtATime: a pool's pulls that replace an image a server holds run
// one at a time, so the old image keeps two builds of every other server for its bots, while a
// server that holds nothing of the pool pulls at once. One prePull per step, servers a, b, c.
func TestPrePullReplacesOneServerAtATime(t *testing.T) {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	pool := bt.MakePool("ns", "pool").MaxSlots(3).Image("bot", "v2").Placement("prj", "", "production").Servers("a", "b", "c").Obj()
	finished := map[string]bool{}
	api := &bt.Coolify{
		ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) { return nil, nil },
		CreateDockerImageApplicationFn: func(_ context.Context, req coolify.CreateApplicationRequest) (string, error) {
			return "app-" + req.ServerUUID, nil
		},
		UpsertEnvsFn: func(_ context.Context, _ string, e []coolify.EnvVar) ([]coolify.EnvVar, error) { return e, nil },
		DeployFn: func(_ context.Context, app string) (coolify.DeployResult, error) {
			return coolify.DeployResult{DeploymentUUID: "dep-" + strings.TrimPrefix(app, "app-")}, nil
		},
		GetDeploymentFn: func(_ context.Context, dep string) (*coolify.Deployment, error) {
			status := coolify.DeploymentInProgress
			if finished[dep] {
				status = coolify.DeploymentFinished
			}
			return &coolify.Deployment{DeploymentUUID: dep, Status: status}, nil
		},
		StopFn: func(context.Context, string) error { return nil },
	}
	old := []v1.CachedImage{{Image: "bot:v1", PulledAt: metav1.NewTime(now.Add(-time.Hour))}}
	images := map[string]*policy.ServerImages{
		"a": {Cached: slices.Clone(old), Pull: &v1.ImagePull{Image: "bot:v2", State: v1.ImagePulling, ApplicationUUID: "app-a", DeploymentUUID: "dep-a", Since: metav1.NewTime(now)}},
		"b": {Cached: slices.Clone(old)},
	}
	r := &Reconciler{Clock: clk, Recorder: &bt.Events{}, Coolify: &coolifyview.BulkReader{Clock: clk}}
	tmpl := policy.PoolTemplate(pool, "", "http://botapi")
	pass := func() map[string]string {
		t.Helper()
		s := &poolScope{pool: pool, api: api, images: images, template: &tmpl}
		if err := r.prePull(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for srv, im := range images {
			switch {
			case im.Pull != nil:
				got[srv] = string(im.Pull.State)
			case policy.HasCached(im.Cached, "bot:v2", ""):
				got[srv] = "cached"
			default:
				got[srv] = "waiting"
			}
		}
		return got
	}

	if got, want := pass(), map[string]string{"a": "Pulling", "b": "waiting", "c": "Pulling"}; !maps.Equal(got, want) {
		t.Fatalf("a's pull in flight: %v, want %v (b replaces its image after a; c holds none and pulls at once)", got, want)
	}
	clk.Step(v1.DefaultDeploymentPollInterval)
	if got, want := pass(), map[string]string{"a": "Pulling", "b": "waiting", "c": "Pulling"}; !maps.Equal(got, want) {
		t.Fatalf("a's pull still in flight: %v, want %v", got, want)
	}
	finished["dep-a"] = true
	clk.Step(v1.DefaultDeploymentPollInterval)
	if got, want := pass(), map[string]string{"a": "cached", "b": "Pulling", "c": "Pulling"}; !maps.Equal(got, want) {
		t.Fatalf("a's pull ended: %v, want %v (b's starts in the same pass)", got, want)
	}
	finished["dep-b"], finished["dep-c"] = true, true
	clk.Step(v1.DefaultDeploymentPollInterval)
	if got, want := pass(), map[string]string{"a": "cached", "b": "cached", "c": "cached"}; !maps.Equal(got, want) {
		t.Fatalf("every pull ended: %v, want %v", got, want)
	}
}

// TestPullPollsForgetOldMarks: the marks are a rate bound keyed by deployments and by the
// applications a Coolify lists ("stop/<uuid>"); a Coolify that lists a new running puller at
// every pass must not grow them without bound (issue 30). A mark younger than pollMemory still
// bounds its polls.
func TestPullPollsForgetOldMarks(t *testing.T) {
	var p pullPolls
	start := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	now := start
	for i := range 100_000 {
		now = start.Add(time.Duration(i) * time.Second)
		p.mark(fmt.Sprintf("stop/app-%d", i), now)
	}
	// One a second over 100,000 s: at most pollMemory of them (plus a sweep's lag) are kept.
	if n, most := len(p.at), int((pollMemory+pollMemory/4)/time.Second)+1; n > most {
		t.Fatalf("%d marks kept after 100,000 over %s, want at most %d", n, now.Sub(start), most)
	}
	if w := p.wait("stop/app-99999", now.Add(time.Minute), policy.StrayAfter); w != policy.StrayAfter-time.Minute {
		t.Fatalf("the newest mark waits %s a minute later, want %s: it still bounds the stops", w, policy.StrayAfter-time.Minute)
	}
	if w := p.wait("stop/app-0", now, policy.StrayAfter); w != 0 {
		t.Fatalf("the oldest mark still waits %s", w)
	}
}
