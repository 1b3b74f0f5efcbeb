package v1alpha1_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	kubetest.Main(m, func(e *kubetest.Env) { env = e })
}

// Builders: each returns a valid object that the cases below break in one place.

func pool(mutate ...func(*v1.BotPool)) *v1.BotPool {
	p := &v1.BotPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: v1.BotPoolSpec{
			Platform: v1.PlatformZoom,
			Image:    "ghcr.io/example/bot",
			Coolify: v1.CoolifyPlacement{
				CredentialsSecretRef: v1.SecretReference{Name: "coolify"},
				ProjectUUID:          "p1",
				ServerUUID:           "s1",
				EnvironmentName:      "production",
			},
		},
	}
	for _, f := range mutate {
		f(p)
	}
	return p
}

func bot(mutate ...func(*v1.Bot)) *v1.Bot {
	b := &v1.Bot{
		ObjectMeta: metav1.ObjectMeta{Name: "bot"},
		Spec:       v1.BotSpec{MeetingURL: "https://us02web.zoom.us/j/123456789"},
	}
	for _, f := range mutate {
		f(b)
	}
	return b
}

func slot(mutate ...func(*v1.BotPoolSlot)) *v1.BotPoolSlot {
	s := &v1.BotPoolSlot{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-zoom-001"},
		Spec:       v1.BotPoolSlotSpec{Pool: "pool"},
	}
	for _, f := range mutate {
		f(s)
	}
	return s
}

func boundTo(name, uid string) func(*v1.BotPoolSlot) {
	return func(s *v1.BotPoolSlot) { s.Spec.BotRef = &v1.BotReference{Name: name, UID: k8stypes.UID("uid-" + uid)} }
}

func TestInvalidObjectsAreRefused(t *testing.T) {
	tests := []struct {
		name string
		obj  client.Object
		// set writes fields by dotted path into the object as sent, for values the typed
		// client would drop (a zero int with omitempty, as `maxSlots: 0` in a YAML file).
		set map[string]any
		// update, when set, is applied to obj after a successful create; the update must be
		// refused. Without it the create itself must be refused.
		update func(client.Object)
		want   string
	}{
		// Bot
		{name: "http meeting URL", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "http://meet.google.com/abc-defg-hij" }),
			want: "meetingUrl must be an https:// URL"},
		{name: "meeting URL that is no URL", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "meet.google.com abc" }),
			want: "meetingUrl must be an https:// URL"},
		{name: "unsupported host", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "https://webex.com/meet/x" }),
			want: "meetingUrl must link to Google Meet"},
		{name: "look-alike host", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "https://zoom.us.evil.example/j/1" }),
			want: "meetingUrl must link to Google Meet"},
		{name: "real host as user info", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "https://meet.google.com@evil.example/x" }),
			want: "meetingUrl must link to Google Meet"},
		{name: "host that only ends like zoom.us", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "https://notzoom.us/j/1" }),
			want: "meetingUrl must link to Google Meet"},
		{name: "missing meeting URL", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "" }),
			want: "meetingUrl must be an https:// URL"},
		{name: "wrong platform for the URL's host", obj: bot(func(b *v1.Bot) { b.Spec.Platform = v1.PlatformGoogleMeet }),
			want: "platform does not match the meetingUrl"},
		{name: "teams URL declared as zoom", obj: bot(func(b *v1.Bot) {
			b.Spec.MeetingURL = "https://teams.microsoft.com/l/meetup-join/x"
			b.Spec.Platform = v1.PlatformZoom
		}), want: "platform does not match the meetingUrl"},
		{name: "unknown platform", obj: bot(func(b *v1.Bot) { b.Spec.Platform = "webex" }),
			want: `Unsupported value: "webex"`},
		{name: "queueTimeout 11m", obj: bot(func(b *v1.Bot) { b.Spec.QueueTimeout = "11m" }),
			want: "queueTimeout must be at most 10m"},
		{name: "negative queueTimeout", obj: bot(func(b *v1.Bot) { b.Spec.QueueTimeout = "-1m" }),
			want: "must be a positive duration"},
		{name: "zero maxDuration", obj: bot(func(b *v1.Bot) { b.Spec.MaxDuration = "0s" }),
			want: "must be a positive duration"},
		{name: "maxDuration over a day", obj: bot(func(b *v1.Bot) { b.Spec.MaxDuration = "25h" }),
			want: "maxDuration must be at most 24h"},
		{name: "duration in words", obj: bot(func(b *v1.Bot) { b.Spec.AutomaticLeave.WaitingRoomTimeout = "5 minutes" }),
			want: "spec.automaticLeave.waitingRoomTimeout: Invalid value"},
		{name: "priority above 1000", obj: bot(func(b *v1.Bot) { b.Spec.Priority = 1001 }),
			want: "spec.priority: Invalid value: 1001: spec.priority in body should be less than or equal to 1000"},
		{name: "priority below -1000", obj: bot(func(b *v1.Bot) { b.Spec.Priority = -1001 }),
			want: "should be greater than or equal to -1000"},
		{name: "display name over 100 characters", obj: bot(func(b *v1.Bot) { b.Spec.DisplayName = strings.Repeat("x", 101) }),
			want: "spec.displayName: Too long"},
		{name: "ftp callback", obj: bot(func(b *v1.Bot) { b.Spec.CallbackURL = "ftp://hooks.example.com/x" }),
			want: "callbackURL must be an http:// or https:// URL"},
		{name: "ftp webhook", obj: bot(func(b *v1.Bot) { b.Spec.Webhook = &v1.Webhook{URL: "ftp://hooks.example.com/x"} }),
			want: "url must be an http:// or https:// URL"},
		{name: "webhook events unknown", obj: bot(func(b *v1.Bot) {
			b.Spec.Webhook = &v1.Webhook{URL: "https://hooks.example.com/x", Events: "Sometimes"}
		}), want: "spec.webhook.events: Unsupported value"},
		{name: "webhook secret name not a Secret name", obj: bot(func(b *v1.Bot) {
			b.Spec.Webhook = &v1.Webhook{URL: "https://hooks.example.com/x", SecretRef: &v1.WebhookSecretRef{Name: "../other", Key: "secret"}}
		}), want: "spec.webhook.secretRef.name: Invalid value"},
		{name: "webhook secret key not a Secret key", obj: bot(func(b *v1.Bot) {
			b.Spec.Webhook = &v1.Webhook{URL: "https://hooks.example.com/x", SecretRef: &v1.WebhookSecretRef{Name: "hook", Key: "a/b"}}
		}), want: "spec.webhook.secretRef.key: Invalid value"},
		{name: "pool webhookDefaults without url", obj: pool(func(p *v1.BotPool) { p.Spec.WebhookDefaults = &v1.Webhook{Events: v1.WebhookEveryPhase} }),
			want: "spec.webhookDefaults.url"},
		{name: "negative ttlAfterFinished", obj: bot(func(b *v1.Bot) { b.Spec.TTLAfterFinished = "-1h" }),
			want: "spec.ttlAfterFinished: Invalid value"},
		{name: "parameters that are no object", obj: bot(), set: map[string]any{"spec.parameters": "deepgram"},
			want: "spec.parameters: Invalid value: \"string\""},
		{name: "parameters with 65 keys", obj: bot(func(b *v1.Bot) { b.Spec.Parameters = manyKeys(65) }),
			want: "spec.parameters: Too many: 65: must have at most 64 items"},
		{name: "pool parameterDefaults with 65 keys", obj: pool(func(p *v1.BotPool) { p.Spec.ParameterDefaults = manyKeys(65) }),
			want: "spec.parameterDefaults: Too many: 65: must have at most 64 items"},
		{name: "secret parameter without a key", obj: bot(func(b *v1.Bot) {
			b.Spec.SecretParameters = []v1.SecretParameter{{Name: "apiKey", SecretKeyRef: v1.SecretKeyReference{Name: "stt"}}}
		}), want: "spec.secretParameters[0].secretKeyRef.key"},
		{name: "secret parameter named like no variable", obj: bot(func(b *v1.Bot) {
			b.Spec.SecretParameters = []v1.SecretParameter{{Name: "api key", SecretKeyRef: v1.SecretKeyReference{Name: "stt", Key: "k"}}}
		}), want: "spec.secretParameters[0].name: Invalid value: \"api key\""},
		{name: "two secret parameters of one name", obj: bot(func(b *v1.Bot) {
			ref := v1.SecretKeyReference{Name: "stt", Key: "k"}
			b.Spec.SecretParameters = []v1.SecretParameter{{Name: "apiKey", SecretKeyRef: ref}, {Name: "apiKey", SecretKeyRef: ref}}
		}), want: "spec.secretParameters[1]: Duplicate value"},
		{name: "changed deduplication key", obj: bot(func(b *v1.Bot) { b.Spec.DeduplicationKey = "standup" }), update: func(o client.Object) {
			o.(*v1.Bot).Spec.DeduplicationKey = "retro"
		}, want: "deduplicationKey is immutable"},
		{name: "deduplication key added", obj: bot(), update: func(o client.Object) {
			o.(*v1.Bot).Spec.DeduplicationKey = "standup"
		}, want: "deduplicationKey is immutable: it can be neither added nor removed"},
		{name: "deduplication key removed", obj: bot(func(b *v1.Bot) { b.Spec.DeduplicationKey = "standup" }), update: func(o client.Object) {
			o.(*v1.Bot).Spec.DeduplicationKey = ""
		}, want: "deduplicationKey is immutable: it can be neither added nor removed"},
		{name: "secret parameter of a Secret that cannot exist", obj: bot(func(b *v1.Bot) {
			b.Spec.SecretParameters = []v1.SecretParameter{{Name: "apiKey", SecretKeyRef: v1.SecretKeyReference{Name: "a/b", Key: "k"}}}
		}), want: "spec.secretParameters[0].secretKeyRef.name: Invalid value: \"a/b\""},
		{name: "pool namespace that is no namespace name", obj: bot(func(b *v1.Bot) { b.Spec.PoolRef = &v1.PoolReference{Name: "p", Namespace: "Team_A"} }),
			want: "namespace must be a namespace name"},
		{name: "allowedNamespaces Selector without a selector", obj: pool(func(p *v1.BotPool) {
			p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesSelector}
		}), want: "set selector with from: Selector, and only then"},
		{name: "allowedNamespaces All with a selector", obj: pool(func(p *v1.BotPool) {
			p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesAll, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}
		}), want: "set selector with from: Selector, and only then"},
		{name: "allowedNamespaces selector without from", obj: pool(func(p *v1.BotPool) {
			p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}
		}), want: "set selector with from: Selector, and only then"},
		{name: "tenancy Label without a label", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByLabel}
		}), want: "set label with key: Label, and only then"},
		{name: "tenancy label that is no label key", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByLabel, Label: "example.com/customer id"}
		}), want: "label must be a label key such as example.com/customer"},
		{name: "tenancy label with a prefix that is no DNS subdomain", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByLabel, Label: "Example.com/customer"}
		}), want: "label must be a label key"},
		{name: "a tenant's share above maxSlots", obj: pool(func(p *v1.BotPool) {
			p.Spec.MaxSlots = 10
			p.Spec.Tenancy = &v1.Tenancy{Tenants: []v1.TenantPolicy{{Name: "team-a", TenantShare: v1.TenantShare{Guaranteed: 11}}}}
		}), want: "a tenant's guaranteed share must not exceed maxSlots"},
		{name: "tenants' shares summing above maxSlots", obj: pool(func(p *v1.BotPool) {
			p.Spec.MaxSlots = 10
			p.Spec.Tenancy = &v1.Tenancy{Tenants: []v1.TenantPolicy{
				{Name: "team-a", TenantShare: v1.TenantShare{Guaranteed: 6}}, {Name: "team-b", TenantShare: v1.TenantShare{Guaranteed: 5}}}}
		}), want: "the tenants' guaranteed shares together must not exceed maxSlots"},
		{name: "a tenant's limit below its share", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Tenants: []v1.TenantPolicy{{Name: "team-a", TenantShare: v1.TenantShare{Guaranteed: 3, Limit: ptr.To[int32](2)}}}}
		}), want: "a tenant's limit must not be below its guaranteed share"},
		{name: "a reservation horizon under an hour", obj: pool(func(p *v1.BotPool) {
			p.Spec.Reservations = &v1.ReservationPolicy{MaxHorizon: "30m"}
		}), want: "maxHorizon must be from 1h to 8760h (a year)"},
		{name: "a reservation horizon over a year", obj: pool(func(p *v1.BotPool) {
			p.Spec.Reservations = &v1.ReservationPolicy{MaxHorizon: "8761h"}
		}), want: "maxHorizon must be from 1h to 8760h (a year)"},
		{name: "defaults that guarantee a share", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Defaults: &v1.TenantShare{Guaranteed: 1}}
		}), want: "defaults cannot guarantee a share"},
		{name: "a tenant listed twice", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Tenants: []v1.TenantPolicy{{Name: "team-a"}, {Name: "team-a"}}}
		}), want: "spec.tenancy.tenants[1]: Duplicate value"},
		{name: "a tenant's weight 0", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Tenants: []v1.TenantPolicy{{Name: "team-a"}}}
		}), set: map[string]any{"spec.tenancy.tenants": []any{map[string]any{"name": "team-a", "weight": int64(0)}}},
			want: "spec.tenancy.tenants[0].weight: Invalid value: 0"},
		{name: "allowedNamespaces from Other", obj: pool(func(p *v1.BotPool) {
			p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: "Other"}
		}), want: "spec.allowedNamespaces.from: Unsupported value: \"Other\""},
		{name: "unknown deduplication", obj: pool(func(p *v1.BotPool) { p.Spec.Deduplication = "Everything" }),
			want: "spec.deduplication: Unsupported value: \"Everything\""},
		{name: "changed meeting URL", obj: bot(), update: func(o client.Object) {
			o.(*v1.Bot).Spec.MeetingURL = "https://zoom.us/j/999"
		}, want: "meetingUrl is immutable"},

		// BotPool
		{name: "maxSlots 0", obj: pool(), set: map[string]any{"spec.maxSlots": int64(0)},
			want: "spec.maxSlots: Invalid value: 0: spec.maxSlots in body should be greater than or equal to 1"},
		{name: "negative minIdle", obj: pool(func(p *v1.BotPool) { p.Spec.MinIdle = -1 }),
			want: "spec.minIdle: Invalid value: -1: spec.minIdle in body should be greater than or equal to 0"},
		{name: "maxSlots over 1000", obj: pool(func(p *v1.BotPool) { p.Spec.MaxSlots = 1001 }),
			want: "should be less than or equal to 1000"},
		{name: "minIdle above maxSlots", obj: pool(func(p *v1.BotPool) { p.Spec.MaxSlots = 5; p.Spec.MinIdle = 6 }),
			want: "minIdle must not exceed maxSlots"},
		{name: "serverUUID and servers", obj: pool(func(p *v1.BotPool) {
			p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "s2"}}
		}), want: "set exactly one of serverUUID (one server) and servers (several)"},
		{name: "neither serverUUID nor servers", obj: pool(func(p *v1.BotPool) { p.Spec.Coolify.ServerUUID = "" }),
			want: "set exactly one of serverUUID (one server) and servers (several)"},
		{name: "a server listed twice", obj: pool(func(p *v1.BotPool) {
			p.Spec.Coolify.ServerUUID = ""
			p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "s1"}, {UUID: "s1"}}
		}), want: "Duplicate value"},
		{name: "pool-wide destination with servers", obj: pool(func(p *v1.BotPool) {
			p.Spec.Coolify.ServerUUID, p.Spec.Coolify.DestinationUUID = "", "d1"
			p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "s1"}}
		}), want: "with servers, set destinationUUID on each server instead"},
		{name: "server weight 101", obj: pool(func(p *v1.BotPool) {
			p.Spec.Coolify.ServerUUID = ""
			p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "s1", Weight: 101}}
		}), want: "spec.coolify.servers[0].weight: Invalid value: 101"},
		{name: "switch to servers without the old server first", obj: pool(), update: func(o client.Object) {
			p := o.(*v1.BotPool)
			p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "s2"}, {UUID: p.Spec.Coolify.ServerUUID}}
			p.Spec.Coolify.ServerUUID = ""
		}, want: "switching from serverUUID to servers: list the old server first"},
		{name: "a slot's server changed", obj: slot(func(s *v1.BotPoolSlot) { s.Spec.Server = "s1" }), update: func(o client.Object) {
			o.(*v1.BotPoolSlot).Spec.Server = "s2"
		}, want: "server is immutable once set"},
		{name: "a slot's server cleared", obj: slot(func(s *v1.BotPoolSlot) { s.Spec.Server = "s1" }), update: func(o client.Object) {
			o.(*v1.BotPoolSlot).Spec.Server = ""
		}, want: "server is immutable once set"},
		{name: "missing platform", obj: pool(func(p *v1.BotPool) { p.Spec.Platform = "" }),
			want: `spec.platform: Unsupported value: ""`},
		{name: "missing image", obj: pool(func(p *v1.BotPool) { p.Spec.Image = "" }),
			want: "spec.image: Invalid value"},
		{name: "no environment", obj: pool(func(p *v1.BotPool) { p.Spec.Coolify.EnvironmentName = "" }),
			want: "set environmentName or environmentUUID (at least one)"},
		{name: "missing credentials Secret name", obj: pool(func(p *v1.BotPool) { p.Spec.Coolify.CredentialsSecretRef.Name = "" }),
			want: "spec.coolify.credentialsSecretRef.name"},
		{name: "queue default above max", obj: pool(func(p *v1.BotPool) { p.Spec.Queue = v1.QueuePolicy{DefaultTimeout: "8m", MaxTimeout: "6m"} }),
			want: "defaultTimeout must not exceed maxTimeout"},
		{name: "negative poll interval", obj: pool(func(p *v1.BotPool) { p.Spec.Timing.DeploymentPollInterval = "-15s" }),
			want: `spec.timing.deploymentPollInterval: Invalid value: "-15s": must be a positive duration such as 30s, 5m or 1h30m`},
		{name: "zero heartbeat timeout", obj: pool(func(p *v1.BotPool) { p.Spec.Timing.HeartbeatTimeout = "0s" }),
			want: `spec.timing.heartbeatTimeout: Invalid value: "0s": must be a positive duration`},
		{name: "no concurrent deployments", obj: pool(), set: map[string]any{"spec.maxConcurrentDeployments": int64(0)},
			want: "spec.maxConcurrentDeployments: Invalid value: 0"},
		{name: "pool with no start at all", obj: pool(), set: map[string]any{"spec.maxStartAttempts": int64(0)},
			want: "maxStartAttempts must be between 1 and 10"},
		{name: "pool with more than 10 starts", obj: pool(func(p *v1.BotPool) { p.Spec.MaxStartAttempts = 11 }),
			want: "maxStartAttempts must be between 1 and 10"},
		{name: "bot with no start at all", obj: bot(), set: map[string]any{"spec.maxStartAttempts": int64(0)},
			want: "maxStartAttempts must be between 1 and 10"},
		{name: "bot with more than 10 starts", obj: bot(func(b *v1.Bot) { b.Spec.MaxStartAttempts = 11 }),
			want: "maxStartAttempts must be between 1 and 10"},
		{name: "zero recovery attempts", obj: pool(), set: map[string]any{"spec.timing.maxRecoveryAttempts": int64(0)},
			want: "spec.timing.maxRecoveryAttempts: Invalid value: 0"},
		{name: "memory with a unit Docker does not know", obj: pool(func(p *v1.BotPool) { p.Spec.Resources.Memory = "2GB" }),
			want: `spec.resources.memory: Invalid value: "2GB": memory must be a number with a unit b, k, m or g`},
		{name: "CPUs as a quantity", obj: pool(func(p *v1.BotPool) { p.Spec.Resources.CPUs = "500m" }),
			want: `spec.resources.cpus: Invalid value: "500m": cpus must be a number of CPUs such as 1 or 1.5`},
		{name: "changed platform", obj: pool(), update: func(o client.Object) {
			o.(*v1.BotPool).Spec.Platform = v1.PlatformGoogleMeet
		}, want: "platform is immutable"},
		{name: "negative maxUnavailable", obj: pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxUnavailable = ptr.To(intstr.FromInt32(-1)) }),
			want: "spec.updateStrategy.maxUnavailable: Invalid value: -1: maxUnavailable must be a count >= 0 or a percent from 0% to 100% such as 25%"},
		{name: "maxUnavailable as a number in a string", obj: pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxUnavailable = ptr.To(intstr.FromString("2")) }),
			want: `spec.updateStrategy.maxUnavailable: Invalid value: "2": maxUnavailable must be a count >= 0 or a percent`},
		{name: "maxUnavailable as a fraction", obj: pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxUnavailable = ptr.To(intstr.FromString("12.5%")) }),
			want: "maxUnavailable must be a count >= 0 or a percent"},
		{name: "maxSurge over 100%", obj: pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxSurge = ptr.To(intstr.FromString("101%")) }),
			want: `spec.updateStrategy.maxSurge: Invalid value: "101%": maxSurge must be a count >= 0 or a percent from 0% to 100% such as 25%`},
		{name: "negative maxSurge percent", obj: pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxSurge = ptr.To(intstr.FromString("-5%")) }),
			want: "maxSurge must be a count >= 0 or a percent"},
		{name: "maxSurge in words", obj: pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxSurge = ptr.To(intstr.FromString("a quarter")) }),
			want: "maxSurge must be a count >= 0 or a percent"},
		{name: "maxSurge percent with a leading zero", obj: pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxSurge = ptr.To(intstr.FromString("025%")) }),
			want: "maxSurge must be a count >= 0 or a percent"},
		{name: "maxSurge as a list", obj: pool(), set: map[string]any{"spec.updateStrategy.maxSurge": []any{int64(1)}},
			want: "spec.updateStrategy.maxSurge"},
		{name: "warm window with four cron fields", obj: pool(func(p *v1.BotPool) {
			p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: "55 * * *", Duration: "10m", MinIdle: 1}}
		}), want: "schedule must be five cron fields"},
		{name: "warm window with @every", obj: pool(func(p *v1.BotPool) {
			p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: "@every 5m", Duration: "10m", MinIdle: 1}}
		}), want: "schedule must be five cron fields"},
		{name: "warm window longer than a week", obj: pool(func(p *v1.BotPool) {
			p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: "0 9 * * 1", Duration: "169h", MinIdle: 1}}
		}), want: "duration must be from 1m to 168h"},
		{name: "warm window shorter than a minute", obj: pool(func(p *v1.BotPool) {
			p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: "0 9 * * 1", Duration: "30s", MinIdle: 1}}
		}), want: "duration must be from 1m to 168h"},
		{name: "warm window in the manager's Local zone", obj: pool(func(p *v1.BotPool) {
			p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: "0 9 * * 1", Duration: "1h", TimeZone: "Local", MinIdle: 1}}
		}), want: "timeZone must name a zone"},
		{name: "warm window without a duration", obj: pool(), set: map[string]any{"spec.warmSchedule": []any{map[string]any{"schedule": "0 9 * * *", "minIdle": int64(1)}}},
			want: "spec.warmSchedule[0].duration: Required value"},
		{name: "warm window above maxSlots", obj: pool(func(p *v1.BotPool) {
			p.Spec.MaxSlots = 5
			p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: "0 9 * * *", Duration: "1h", MinIdle: 6}}
		}), want: "a warmSchedule window's minIdle must not exceed maxSlots"},
		{name: "warm window time zone with a space", obj: pool(func(p *v1.BotPool) {
			p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: "0 9 * * *", Duration: "1h", TimeZone: "Europe/Berlin Summer", MinIdle: 1}}
		}), want: "spec.warmSchedule[0].timeZone"},
		{name: "negative scaleDownDelay", obj: pool(func(p *v1.BotPool) { p.Spec.ScaleDownDelay = "-1m" }),
			want: "spec.scaleDownDelay: Invalid value"},
		{name: "reservation minLead under a minute", obj: pool(func(p *v1.BotPool) {
			p.Spec.Reservations = &v1.ReservationPolicy{MinLead: "30s"}
		}), want: `spec.reservations.minLead: Invalid value: "30s": minLead must be from 1m to 168h`},
		{name: "unknown reservation mode", obj: pool(func(p *v1.BotPool) {
			p.Spec.Reservations = &v1.ReservationPolicy{Mode: "Maybe"}
		}), want: `spec.reservations.mode: Unsupported value: "Maybe"`},

		// BotPoolSlot
		{name: "slot without pool", obj: slot(func(s *v1.BotPoolSlot) { s.Spec.Pool = "" }),
			want: "spec.pool: Invalid value"},
		{name: "bot reference without uid", obj: slot(func(s *v1.BotPoolSlot) { s.Spec.BotRef = &v1.BotReference{Name: "b"} }),
			want: "spec.botRef.uid"},
		{name: "changed pool", obj: slot(), update: func(o client.Object) {
			o.(*v1.BotPoolSlot).Spec.Pool = "other"
		}, want: "pool is immutable"},
		{name: "binding a slot that is already bound", obj: slot(boundTo("a", "1")), update: func(o client.Object) {
			boundTo("b", "2")(o.(*v1.BotPoolSlot))
		}, want: "botRef can only be set on a free slot"},
	}
	if len(tests) < 20 {
		t.Fatalf("the issue asks for at least 20 invalid objects, the table has %d", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			tt.obj.SetNamespace(env.Namespace(t))
			err := env.Client.Create(ctx, withFields(t, tt.obj, tt.set))
			if tt.update != nil {
				if err != nil {
					t.Fatalf("creating the valid object to update: %v", err)
				}
				tt.update(tt.obj)
				err = env.Client.Update(ctx, tt.obj)
			}
			if err == nil {
				t.Fatalf("accepted; want refused with %q", tt.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error %v is not an Invalid error", err)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error\n  %v\ndoes not contain\n  %s", err, tt.want)
			}
		})
	}
}

func TestValidObjectsAreAccepted(t *testing.T) {
	tests := []struct {
		name   string
		obj    client.Object
		update func(client.Object)
	}{
		{name: "zoom subdomain", obj: bot()},
		{name: "bare zoom.us", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "https://zoom.us/j/1"; b.Spec.Platform = v1.PlatformZoom })},
		{name: "teams.live.com", obj: bot(func(b *v1.Bot) {
			b.Spec.MeetingURL = "https://teams.live.com/meet/9876"
			b.Spec.Platform = v1.PlatformMicrosoftTeams
		})},
		{name: "upper-case host", obj: bot(func(b *v1.Bot) { b.Spec.MeetingURL = "https://Meet.Google.com/abc-defg-hij" })},
		{name: "fractional and compound durations", obj: bot(func(b *v1.Bot) {
			b.Spec.QueueTimeout = "1m30s"
			b.Spec.MaxDuration = "1.5h"
			b.Spec.TTLAfterFinished = "720h"
		})},
		{name: "queueTimeout exactly 10m", obj: bot(func(b *v1.Bot) { b.Spec.QueueTimeout = "10m" })},
		{name: "start attempts at the bounds", obj: bot(func(b *v1.Bot) { b.Spec.MaxStartAttempts = 10 })},
		{name: "a pool of another namespace", obj: bot(func(b *v1.Bot) { b.Spec.PoolRef = &v1.PoolReference{Name: "shared", Namespace: "platform"} })},
		{name: "a pool shared by namespace labels", obj: pool(func(p *v1.BotPool) {
			p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesSelector, Selector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "botpool.dev/tenant", Operator: metav1.LabelSelectorOpExists}}}}
		})},
		{name: "tenants with shares, limits and weights", obj: pool(func(p *v1.BotPool) {
			p.Spec.MaxSlots = 60
			p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByLabel, Label: "example.com/customer", Tenants: []v1.TenantPolicy{
				{Name: "acme", TenantShare: v1.TenantShare{Guaranteed: 15, Limit: ptr.To[int32](40), Weight: 2}},
				{Name: "globex", TenantShare: v1.TenantShare{Guaranteed: 15}},
				{Name: "initech", TenantShare: v1.TenantShare{Guaranteed: 30}}},
				Defaults: &v1.TenantShare{Limit: ptr.To[int32](5)}}
		})},
		{name: "tenancy by a label without a prefix", obj: pool(func(p *v1.BotPool) {
			p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByLabel, Label: "customer"}
		})},
		{name: "a pool shared with every namespace", obj: pool(func(p *v1.BotPool) {
			p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesAll}
		})},
		{name: "a pool that never retries", obj: pool(func(p *v1.BotPool) { p.Spec.MaxStartAttempts = 1 })},
		{name: "pool by environment uuid", obj: pool(func(p *v1.BotPool) {
			p.Spec.Coolify.EnvironmentName = ""
			p.Spec.Coolify.EnvironmentUUID = "e1"
		})},
		{name: "minIdle equal to maxSlots", obj: pool(func(p *v1.BotPool) { p.Spec.MaxSlots = 3; p.Spec.MinIdle = 3 })},
		{name: "pool settings may change", obj: pool(), update: func(o client.Object) {
			p := o.(*v1.BotPool)
			p.Spec.MaxSlots, p.Spec.ImageTag, p.Spec.Timing.DeployingTimeout = 7, "v2", "20m"
		}},
		{name: "pool on several servers", obj: pool(func(p *v1.BotPool) {
			p.Spec.Coolify.ServerUUID = ""
			p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "s1", DestinationUUID: "d1", Weight: 2}, {UUID: "s2", MaxSlots: ptr.To[int32](10), Cordoned: true}}
		})},
		{name: "switch to servers with the old server first", obj: pool(), update: func(o client.Object) {
			p := o.(*v1.BotPool)
			p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: p.Spec.Coolify.ServerUUID}, {UUID: "s2"}}
			p.Spec.Coolify.ServerUUID = ""
		}},
		{name: "a slot's server recorded once", obj: slot(), update: func(o client.Object) { o.(*v1.BotPoolSlot).Spec.Server = "s1" }},
		{name: "binding a free slot", obj: slot(), update: func(o client.Object) { boundTo("a", "1")(o.(*v1.BotPoolSlot)) }},
		{name: "releasing a bound slot", obj: slot(boundTo("a", "1")), update: func(o client.Object) {
			o.(*v1.BotPoolSlot).Spec.BotRef = nil
		}},
		{name: "update strategy as counts", obj: pool(func(p *v1.BotPool) {
			p.Spec.UpdateStrategy = v1.UpdateStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(2)), MaxSurge: ptr.To(intstr.FromInt32(0))}
		})},
		{name: "update strategy as percents at the bounds", obj: pool(func(p *v1.BotPool) {
			p.Spec.UpdateStrategy = v1.UpdateStrategy{MaxUnavailable: ptr.To(intstr.FromString("0%")), MaxSurge: ptr.To(intstr.FromString("100%"))}
		})},
		{name: "warm windows in zones, with descriptors", obj: pool(func(p *v1.BotPool) {
			p.Spec.MaxSlots, p.Spec.ScaleDownDelay = 50, "30m"
			p.Spec.WarmSchedule = []v1.WarmWindow{
				{Schedule: "55 * * * 1-5", Duration: "10m", TimeZone: "Europe/Berlin", MinIdle: 40},
				{Schedule: "@daily", Duration: "168h", TimeZone: "America/Argentina/Buenos_Aires", MinIdle: 0},
				{Schedule: "*/30 8-18 * * MON-FRI", Duration: "5m", TimeZone: "Etc/GMT+5", MinIdle: 50},
			}
		})},
		{name: "update strategy may change", obj: pool(), update: func(o client.Object) {
			o.(*v1.BotPool).Spec.UpdateStrategy = v1.UpdateStrategy{MaxUnavailable: ptr.To(intstr.FromString("50%")), MaxSurge: ptr.To(intstr.FromInt32(3))}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			tt.obj.SetNamespace(env.Namespace(t))
			if err := env.Client.Create(ctx, tt.obj); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tt.update != nil {
				tt.update(tt.obj)
				if err := env.Client.Update(ctx, tt.obj); err != nil {
					t.Fatalf("update refused: %v", err)
				}
			}
		})
	}
}

// TestSamplesAreAcceptedAndDefaulted applies every object of config/samples and checks the
// defaults the API server filled in against what the samples' comments and the docs promise.
func TestSamplesAreAcceptedAndDefaulted(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)

	wantDefaults := map[string]func(t *testing.T, key client.ObjectKey){
		"Secret/coolify-credentials": func(*testing.T, client.ObjectKey) {},
		"BotPool/google-meet": func(t *testing.T, key client.ObjectKey) {
			var p v1.BotPool
			get(t, key, &p)
			s := p.Spec
			expect(t, "imageTag", s.ImageTag, v1.DefaultImageTag)
			expect(t, "maxSlots", s.MaxSlots, int32(10))
			expect(t, "minIdle", s.MinIdle, int32(2))
			expect(t, "maxConcurrentDeployments (unset: follows the server)", s.MaxConcurrentDeployments, int32(0))
			expect(t, "maxStartAttempts", s.MaxStartAttempts, int32(v1.DefaultMaxStartAttempts))
			expect(t, "queue.defaultTimeout", s.Queue.DefaultTimeout.Duration(), v1.DefaultQueueTimeout)
			expect(t, "queue.maxTimeout", s.Queue.MaxTimeout.Duration(), v1.DefaultMaxQueueTimeout)
			tm := s.Timing
			expect(t, "timing.deploymentPollInterval", tm.DeploymentPollInterval.Duration(), v1.DefaultDeploymentPollInterval)
			expect(t, "timing.deployGracePeriod", tm.DeployGracePeriod.Duration(), v1.DefaultDeployGracePeriod)
			expect(t, "timing.deploymentTimeout", tm.DeploymentTimeout.Duration(), v1.DefaultDeploymentTimeout)
			expect(t, "timing.deployingTimeout", tm.DeployingTimeout.Duration(), v1.DefaultDeployingTimeout)
			expect(t, "timing.heartbeatFreshness", tm.HeartbeatFreshness.Duration(), v1.DefaultHeartbeatFreshness)
			expect(t, "timing.heartbeatGracePeriod", tm.HeartbeatGracePeriod.Duration(), v1.DefaultHeartbeatGracePeriod)
			expect(t, "timing.heartbeatTimeout", tm.HeartbeatTimeout.Duration(), v1.DefaultHeartbeatTimeout)
			expect(t, "timing.leaveGracePeriod", tm.LeaveGracePeriod.Duration(), v1.DefaultLeaveGracePeriod)
			expect(t, "timing.maxSkippedRecoveries", tm.SkipLimit(), int32(v1.DefaultMaxSkippedRecoveries))
			expect(t, "timing.maxSkippedRecoveries is stored", tm.MaxSkippedRecoveries != nil, true)
			expect(t, "timing.maxRecoveryAttempts", tm.MaxRecoveryAttempts, int32(v1.DefaultMaxRecoveryAttempts))
			us := s.UpdateStrategy
			expect(t, "updateStrategy.maxUnavailable is stored", us.MaxUnavailable != nil, true)
			expect(t, "updateStrategy.maxSurge is stored", us.MaxSurge != nil, true)
			expect(t, "updateStrategy.maxUnavailable", us.MaxUnavailableOrDefault(), intstr.FromInt32(v1.DefaultMaxUnavailable))
			expect(t, "updateStrategy.maxSurge", us.MaxSurgeOrDefault(), intstr.FromString(v1.DefaultMaxSurge))
		},
		"BotPool/teams": func(t *testing.T, key client.ObjectKey) {
			var p v1.BotPool
			get(t, key, &p)
			c := p.Spec.Coolify
			expect(t, "serverUUID (servers instead)", c.ServerUUID, "")
			expect(t, "servers", len(c.Servers), 3)
			expect(t, "the default server is the first listed", c.DefaultServer(), "pw4koo0sc8os0cw8gsgw40g4")
			expect(t, "servers[0].weight", c.Servers[0].Weight, int32(1))
			expect(t, "servers[1].weight", c.Servers[1].Weight, int32(2))
			expect(t, "servers[0].maxSlots (unbounded but by the pool's)", c.Servers[0].MaxSlots == nil, true)
			expect(t, "servers[2].maxSlots", *c.Servers[2].MaxSlots, int32(6))
			expect(t, "servers[2].cordoned", c.Servers[2].Cordoned, false)
			expect(t, "maxSlots", p.Spec.MaxSlots, int32(30))
			expect(t, "maxStartAttempts", p.Spec.MaxStartAttempts, int32(3))
		},
		"Bot/standup": func(t *testing.T, key client.ObjectKey) {
			var b v1.Bot
			get(t, key, &b)
			s := b.Spec
			expect(t, "platform (derived later, not defaulted)", s.Platform, v1.Platform(""))
			expect(t, "priority", s.Priority, int32(0))
			expect(t, "queueTimeout (the pool's default applies)", s.QueueTimeout, v1.Duration(""))
			expect(t, "maxDuration", s.MaxDuration.Duration(), v1.DefaultMaxDuration)
			expect(t, "recording.enabled", s.Recording.Enabled, false)
			expect(t, "automaticLeave.waitingRoomTimeout", s.AutomaticLeave.WaitingRoomTimeout.Duration(), 10*time.Minute)
			expect(t, "automaticLeave.noOneJoinedTimeout", s.AutomaticLeave.NoOneJoinedTimeout.Duration(), 10*time.Minute)
			expect(t, "automaticLeave.everyoneLeftTimeout", s.AutomaticLeave.EveryoneLeftTimeout.Duration(), 30*time.Second)
			expect(t, "automaticLeave.inactivityTimeout", s.AutomaticLeave.InactivityTimeout.Duration(), 30*time.Minute)
			expect(t, "ttlAfterFinished (kept forever)", s.TTLAfterFinished, v1.Duration(""))
		},
		"Secret/deepgram": func(*testing.T, client.ObjectKey) {},
		"Bot/customer-interview": func(t *testing.T, key client.ObjectKey) {
			var b v1.Bot
			get(t, key, &b)
			s := b.Spec
			expect(t, "parameters", string(s.Parameters.Raw), `{"transcription":{"language":"de","provider":"deepgram"},"upload":{"bucket":"s3://team-a-recordings"}}`)
			expect(t, "secretParameters", len(s.SecretParameters), 1)
			expect(t, "secretParameters[0]", s.SecretParameters[0].SecretKeyRef, v1.SecretKeyReference{Name: "deepgram", Key: "apiKey"})
			expect(t, "deduplicationKey", s.DeduplicationKey, "calendar-event-4711")
		},
		"Bot/board-meeting": func(t *testing.T, key client.ObjectKey) {
			var b v1.Bot
			get(t, key, &b)
			s := b.Spec
			expect(t, "priority", s.Priority, int32(100))
			expect(t, "queueTimeout", s.QueueTimeout.Duration(), 8*time.Minute)
			expect(t, "maxDuration", s.MaxDuration.Duration(), 3*time.Hour)
			expect(t, "recording.enabled", s.Recording.Enabled, true)
			expect(t, "automaticLeave.waitingRoomTimeout", s.AutomaticLeave.WaitingRoomTimeout.Duration(), 15*time.Minute)
			expect(t, "automaticLeave.everyoneLeftTimeout (defaulted beside a set sibling)", s.AutomaticLeave.EveryoneLeftTimeout.Duration(), 30*time.Second)
			expect(t, "startTime", s.StartTime.UTC().Format(time.RFC3339), "2030-01-15T14:00:00Z")
		},
	}

	seen := map[string]bool{}
	for _, obj := range readSamples(t) {
		id := obj.GetKind() + "/" + obj.GetName()
		check, ok := wantDefaults[id]
		if !ok {
			t.Errorf("sample %s has no expectations in this test: add them", id)
			continue
		}
		obj.SetNamespace(ns)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("sample %s refused: %v", id, err)
			continue
		}
		seen[id] = true
		t.Run(id, func(t *testing.T) { check(t, client.ObjectKey{Namespace: ns, Name: obj.GetName()}) })
	}
	for id := range wantDefaults {
		if !seen[id] {
			t.Errorf("expected sample %s was not found in config/samples", id)
		}
	}
}

// TestTenancySampleIsAccepted applies config/samples/tenancy/shared-pool.yaml (namespaces
// first, as kubectl does) and checks what it promises: the pool shares itself by the label its
// tenants' namespaces carry, and the tenants' Bots name it or nothing.
func TestTenancySampleIsAccepted(t *testing.T) {
	ctx := context.Background()
	objs := readSampleFile(t, filepath.Join(kubetest.RepoRoot(), "config", "samples", "tenancy", "shared-pool.yaml"))
	kinds := map[string]int{}
	for _, obj := range objs {
		kinds[obj.GetKind()]++
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("%s %s/%s refused: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
	if kinds["Namespace"] != 3 || kinds["BotPool"] != 1 || kinds["Bot"] != 2 || kinds["Role"] != 2 {
		t.Fatalf("the sample holds %v", kinds)
	}
	var pool v1.BotPool
	get(t, client.ObjectKey{Namespace: "platform", Name: "zoom"}, &pool)
	a := pool.Spec.AllowedNamespaces
	if a == nil || a.From != v1.NamespacesSelector || a.Selector.MatchLabels["botpool.dev/meeting-bots"] != "platform" {
		t.Errorf("allowedNamespaces %+v", a)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		var n corev1.Namespace
		get(t, client.ObjectKey{Name: ns}, &n)
		if n.Labels["botpool.dev/meeting-bots"] != "platform" {
			t.Errorf("namespace %s is not labelled for the pool: %v", ns, n.Labels)
		}
	}
	var named v1.Bot
	get(t, client.ObjectKey{Namespace: "team-a", Name: "weekly-sync"}, &named)
	expect(t, "poolRef", *named.Spec.PoolRef, v1.PoolReference{Namespace: "platform", Name: "zoom"})
}

// withFields returns obj itself when fields is empty, else an unstructured copy with the fields
// set.
func withFields(t *testing.T, obj client.Object, fields map[string]any) client.Object {
	t.Helper()
	if len(fields) == 0 {
		return obj
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	gvk, err := apiutil.GVKForObject(obj, env.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	u.SetGroupVersionKind(gvk)
	for path, v := range fields {
		if err := unstructured.SetNestedField(u.Object, v, strings.Split(path, ".")...); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

func readSamples(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			objs = append(objs, readSampleFile(t, f)...)
		}
	}
	return objs
}

// readSampleFile is the objects of one YAML file, in their order.
func readSampleFile(t *testing.T, f string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

func get(t *testing.T, key client.ObjectKey, obj client.Object) {
	t.Helper()
	if err := env.Client.Get(context.Background(), key, obj); err != nil {
		t.Fatal(err)
	}
}

func expect[T comparable](t *testing.T, field string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

// TestUpdateStrategyDefaults: the API server fills in each field of updateStrategy on its own,
// beside a sibling the user set, with the types the controllers read (a count stays a count).
func TestUpdateStrategyDefaults(t *testing.T) {
	ctx := context.Background()
	p := pool(func(p *v1.BotPool) { p.Spec.UpdateStrategy.MaxSurge = ptr.To(intstr.FromInt32(1)) })
	p.Namespace = env.Namespace(t)
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	var got v1.BotPool
	get(t, client.ObjectKeyFromObject(p), &got)
	us := got.Spec.UpdateStrategy
	if us.MaxUnavailable == nil || *us.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf("maxUnavailable = %v, want the count 0", us.MaxUnavailable)
	}
	if us.MaxSurge == nil || *us.MaxSurge != intstr.FromInt32(1) {
		t.Errorf("maxSurge = %v, want the count 1 as set", us.MaxSurge)
	}
}

// manyKeys is a JSON object of n keys.
func manyKeys(n int) *apiextensionsv1.JSON {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:%d", fmt.Sprintf("k%d", i), i)
	}
	b.WriteString("}")
	return &apiextensionsv1.JSON{Raw: []byte(b.String())}
}
