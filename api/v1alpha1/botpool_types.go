package v1alpha1

import (
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults of BotPool.spec, the same values the CRD defaults to. Controllers fall back to them
// when a field is unset (an object stored before a default existed).
const (
	DefaultMaxSlots = 100
	// DefaultMaxConcurrentDeployments bounds a pool without maxConcurrentDeployments while its
	// server's capacity is unknown (the CRD has no default: unset follows the server).
	DefaultMaxConcurrentDeployments = 4
	DefaultImageTag                 = "latest"

	DefaultQueueTimeout    = 5 * time.Minute
	DefaultMaxQueueTimeout = 10 * time.Minute

	DefaultDeploymentPollInterval = 15 * time.Second
	DefaultDeployGracePeriod      = 3 * time.Minute
	DefaultDeploymentTimeout      = 25 * time.Minute
	DefaultDeployingTimeout       = 15 * time.Minute
	DefaultHeartbeatFreshness     = 5 * time.Minute
	DefaultHeartbeatGracePeriod   = 30 * time.Second
	DefaultHeartbeatTimeout       = 5 * time.Minute
	DefaultLeaveGracePeriod       = 15 * time.Second
	DefaultMaxSkippedRecoveries   = 3
	DefaultMaxRecoveryAttempts    = 3
	DefaultScaleDownDelay         = 10 * time.Minute
)

// Defaults of BotPool.spec.updateStrategy, the same values the CRD defaults to.
const (
	// DefaultMaxUnavailable (a count) keeps minIdle slots ready throughout a rollout that can surge.
	DefaultMaxUnavailable = 0
	// DefaultMaxSurge lets a rollout add a quarter of minIdle (rounded up) above the pool's size.
	DefaultMaxSurge = "25%"
)

// BotPoolSpec is the desired state of a pool: which image runs where, how many slots at most,
// how many kept warm, and the timings of the slot lifecycle.
//
// +kubebuilder:validation:XValidation:rule="self.minIdle <= self.maxSlots",message="minIdle must not exceed maxSlots"
// +kubebuilder:validation:XValidation:rule="!has(self.warmSchedule) || self.warmSchedule.all(w, w.minIdle <= self.maxSlots)",message="a warmSchedule window's minIdle must not exceed maxSlots"
// +kubebuilder:validation:XValidation:rule="!has(self.tenancy) || !has(self.tenancy.tenants) || self.tenancy.tenants.all(t, !has(t.guaranteed) || t.guaranteed <= self.maxSlots)",message="a tenant's guaranteed share must not exceed maxSlots"
// +kubebuilder:validation:XValidation:rule="!has(self.tenancy) || !has(self.tenancy.tenants) || self.tenancy.tenants.map(t, has(t.guaranteed) ? t.guaranteed : 0).sum() <= self.maxSlots",message="the tenants' guaranteed shares together must not exceed maxSlots"
type BotPoolSpec struct {
	// Platform is the meeting platform every slot of this pool serves. Bots of another
	// platform never land here. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="platform is immutable; create a new pool instead"
	Platform Platform `json:"platform"`

	// Image is the bot container image, optionally with a registry host (no tag: see imageTag).
	// Private registries need `docker login` on the Coolify server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Image string `json:"image"`

	// ImageTag is the tag of Image.
	// +optional
	// +kubebuilder:default=latest
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`
	ImageTag string `json:"imageTag,omitempty"`

	// Coolify says which Coolify instance, project, environment and server hold the slots.
	// +required
	Coolify CoolifyPlacement `json:"coolify"`

	// Resources are the container limits of every slot.
	// +optional
	Resources SlotResources `json:"resources,omitempty"`

	// MaxSlots is the most slots (Coolify applications) the pool ever holds.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxSlots int32 `json:"maxSlots,omitempty"`

	// MinIdle is how many free, warm slots the pool keeps ready. 0 creates slots only when
	// bots wait for one. A window of warmSchedule may raise it for a while (status.minIdle is
	// the value in force); the scale subresource sets it (kubectl scale, HPA, KEDA).
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	MinIdle int32 `json:"minIdle"`

	// WarmSchedule raises minIdle in windows that recur on a schedule, for the load a calendar
	// brings at the hour and the half hour: e.g. 40 ready slots from :55 to :05 every weekday
	// hour is {schedule: "55 * * * 1-5", duration: 10m, minIdle: 40}. While windows are open
	// the pool keeps the largest of their minIdle and spec.minIdle free (status.minIdle).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	WarmSchedule []WarmWindow `json:"warmSchedule,omitempty"`

	// ScaleDownDelay is how long the pool holds more free slots than it needs (the minIdle in
	// force, that of windows opening within this delay, and the waiting bots) before it removes
	// the surplus: what a burst or a closed warm window left behind goes, a slot between two
	// bots of a steady stream stays. Slots whose standby container is not ready go first, then
	// the highest numbers, never one bound to a bot. Longer than the gap between two warm
	// windows keeps their slots from one to the next.
	// +optional
	// +kubebuilder:default="10m"
	ScaleDownDelay Duration `json:"scaleDownDelay,omitempty"`

	// Reservations says whether scheduled bots reserve a slot of the pool for their start,
	// and how far ahead they must be created to. Unset: reserved, at least 10 minutes ahead.
	// +optional
	Reservations *ReservationPolicy `json:"reservations,omitempty"`

	// Standby says what a free slot's container does. Stopped (the default): a free slot has
	// no container, and every bot's start is a Coolify deployment. Running: a free slot keeps
	// a container running that waits on the bot API for its binding, so a bot starts with no
	// Coolify request at all; after each bot the slot gets a fresh container (a deployment,
	// off the start path), and minIdle counts ready containers (the pool is Reconciling,
	// WarmingStandby, until that many are; a slot whose fresh container is on its way gets
	// no extra slot beside it). Idle containers cost the server memory and CPU (see
	// docs/pools-and-slots.md).
	// +optional
	// +kubebuilder:default=Stopped
	Standby StandbyMode `json:"standby,omitempty"`

	// MaxConcurrentDeployments caps the deployments in flight at once for this pool, so a
	// burst of bots does not overrun the Coolify server's build queue. Unset: what the pool's
	// server runs at once (its concurrent_builds, read from Coolify), shared with the other
	// pools there; 4 while that is unknown.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxConcurrentDeployments int32 `json:"maxConcurrentDeployments,omitempty"`

	// SlotEnvFrom names a Secret in the pool's namespace whose keys become environment
	// variables of every slot's container. Its content is part of the slot template: a change
	// rolls the slots out (read again at least once a minute).
	// The Secret must carry the label botpool.dev/allow-pool-use=true, or the slots stall.
	// +optional
	SlotEnvFrom *SecretReference `json:"slotEnvFrom,omitempty"`

	// Queue holds the limits of the pool's wait queue.
	// +optional
	// +kubebuilder:default={}
	Queue QueuePolicy `json:"queue,omitempty"`

	// Timing holds the timers of the slot lifecycle and of bot liveness.
	// +optional
	// +kubebuilder:default={}
	Timing Timing `json:"timing,omitempty"`

	// MaxStartAttempts is how many starts a bot of this pool gets in all (a Bot's own
	// maxStartAttempts overrides it). A start that fails for a reason of the infrastructure
	// before the bot ran (its binding never handed out) puts the bot back at the head of the
	// queue, preferring a slot on another server; the last failure ends it Fatal.
	// 1 never retries.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 10",message="maxStartAttempts must be between 1 and 10"
	MaxStartAttempts int32 `json:"maxStartAttempts,omitempty"`

	// WebhookDefaults is the webhook of the pool's bots that set no spec.webhook of their own.
	// +optional
	WebhookDefaults *Webhook `json:"webhookDefaults,omitempty"`

	// ParameterDefaults are the parameters of the pool's bots that a bot's own
	// spec.parameters does not set (top-level keys: a key the bot sets replaces the default's
	// whole value). At most 64 top-level keys; 32 KiB once merged with a bot's.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:MaxProperties=64
	ParameterDefaults *apiextensionsv1.JSON `json:"parameterDefaults,omitempty"`

	// Deduplication gives the pool's bots that set no spec.deduplicationKey a key of their
	// own: MeetingURL, the normalized meeting URL (scheme, host case, query strings, passwords
	// and trailing slashes do not make two links to one meeting differ), so a second bot sent
	// to a meeting the pool already serves ends Fatal with reason Duplicate. None (the
	// default) keys only the bots that set one.
	// +optional
	// +kubebuilder:default=None
	// +kubebuilder:validation:Enum=None;MeetingURL
	Deduplication Deduplication `json:"deduplication,omitempty"`

	// AllowedNamespaces says whose Bots the pool serves, as a Gateway's listeners say whose
	// routes they take: Same (the default) its own namespace's only; Selector also those of the
	// namespaces whose labels match selector; All every namespace's. A Bot of another namespace
	// reaches the pool by spec.poolRef (with namespace) or, naming none, when no pool of its
	// own namespace serves its platform. A namespace the pool stops admitting gets no new
	// binding (its waiting bots go back to Pending, PoolNotAllowed); its running bots keep
	// their slots to their end. See docs/tenancy.md.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`

	// Tenancy divides the pool between tenants: each tenant (a namespace, or a value of a
	// label on the Bots) gets at most its limit of the pool's slots, is guaranteed its share
	// whenever it has bots waiting, and may borrow what nobody uses; when tenants wait, the
	// next free slot goes to the one furthest below its share. Unset: one queue for all, by
	// reservation, priority and arrival. See docs/tenancy.md.
	// +optional
	Tenancy *Tenancy `json:"tenancy,omitempty"`

	// UpdateStrategy bounds how a rollout (a change of image, imageTag, resources, the
	// slotEnvFrom Secret's content or the botpool.dev/restartedAt annotation) takes ready slots
	// away and how many it may add. Set by the user; the defaults keep minIdle slots ready.
	// +optional
	// +kubebuilder:default={}
	UpdateStrategy UpdateStrategy `json:"updateStrategy,omitempty"`
}

// NamespacesFrom says which namespaces a pool admits: Same, Selector or All.
// +kubebuilder:validation:Enum=Same;Selector;All
type NamespacesFrom string

const (
	// NamespacesSame admits the pool's own namespace only.
	NamespacesSame NamespacesFrom = "Same"
	// NamespacesSelector admits the pool's namespace and those whose labels match the selector.
	NamespacesSelector NamespacesFrom = "Selector"
	// NamespacesAll admits every namespace.
	NamespacesAll NamespacesFrom = "All"
)

// AllowedNamespaces says whose Bots a pool serves.
// +kubebuilder:validation:XValidation:rule="(self.from == 'Selector') == has(self.selector)",message="set selector with from: Selector, and only then"
type AllowedNamespaces struct {
	// From is Same, Selector or All.
	// +optional
	// +kubebuilder:default=Same
	From NamespacesFrom `json:"from,omitempty"`

	// Selector picks the admitted namespaces by their labels (with from: Selector). The
	// kubernetes.io/metadata.name label, which the API server sets on every namespace, picks
	// namespaces by name.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// TenantKey says what makes a bot's tenant: its Namespace or a Label on it.
// +kubebuilder:validation:Enum=Namespace;Label
type TenantKey string

const (
	// TenantByNamespace: a bot's tenant is its namespace.
	TenantByNamespace TenantKey = "Namespace"
	// TenantByLabel: a bot of the pool's own namespace belongs to the tenant its label names
	// (tenancy.label); a bot of another namespace to its namespace, whatever its labels say.
	TenantByLabel TenantKey = "Label"
)

// MaxTenants is how many tenants a pool's tenancy may list.
const MaxTenants = 64

// Tenancy divides a pool between tenants.
// +kubebuilder:validation:XValidation:rule="(self.key == 'Label') == has(self.label)",message="set label with key: Label, and only then"
// +kubebuilder:validation:XValidation:rule="!has(self.tenants) || self.tenants.all(t, !has(t.limit) || t.limit >= (has(t.guaranteed) ? t.guaranteed : 0))",message="a tenant's limit must not be below its guaranteed share"
// +kubebuilder:validation:XValidation:rule="!has(self.defaults) || !has(self.defaults.guaranteed) || self.defaults.guaranteed == 0",message="defaults cannot guarantee a share: a guarantee is promised to a tenant by name (list it in tenants), so the guarantees can be counted against maxSlots"
type Tenancy struct {
	// Key is Namespace (the default: a bot's tenant is its namespace) or Label (a bot's tenant
	// is the value of label on it, for the bots of the pool's own namespace: a SaaS that keeps
	// every customer's bots in one namespace; a bot of another namespace counts as its
	// namespace, so no namespace can spend another tenant's share by its labels).
	// +optional
	// +kubebuilder:default=Namespace
	Key TenantKey `json:"key,omitempty"`

	// Label is the label key whose value names a bot's tenant (key: Label), such as
	// example.com/customer. A bot without it belongs to the tenant "" (the defaults).
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')",message="label must be a label key such as example.com/customer: an optional DNS subdomain prefix and '/', then 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	Label string `json:"label,omitempty"`

	// Tenants are the tenants with a policy of their own, by name (a namespace, or a label
	// value), at most 64. Their guaranteed shares together may not exceed maxSlots.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Tenants []TenantPolicy `json:"tenants,omitempty"`

	// Defaults is the policy of every tenant not listed: no limit of its own and weight 1,
	// unless it says otherwise. It guarantees no share: a guarantee is a tenant's by name.
	// +optional
	Defaults *TenantShare `json:"defaults,omitempty"`
}

// TenantPolicy is one tenant's share of a pool.
type TenantPolicy struct {
	// Name is the tenant: a namespace (key: Namespace) or a label value (key: Label).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	TenantShare `json:",inline"`
}

// TenantShare is how much of a pool a tenant may hold and is promised.
type TenantShare struct {
	// Limit is the most bots of the tenant that may be bound to the pool's slots at once
	// (starting or running); its further bots wait Queued with reason TenantLimit. Unset: the
	// pool's maxSlots.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Limit *int32 `json:"limit,omitempty"`

	// Guaranteed is how many of the pool's slots are the tenant's whenever it has bots
	// waiting: while it holds fewer, its bots are served before those of any tenant at or
	// above its own guarantee. Running bots are never cut short for it: borrowed slots come
	// back as meetings end.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Guaranteed int32 `json:"guaranteed,omitempty"`

	// Weight divides what the tenants borrow beyond their guarantees: a tenant of weight 2
	// borrows twice as many slots as one of weight 1 before the next slot goes to the other.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight,omitempty"`
}

// Deduplication says which bots of a pool have a deduplication key: None (only those that set
// spec.deduplicationKey) or MeetingURL (every bot, by its normalized meeting URL unless it
// sets its own key).
type Deduplication string

const (
	DeduplicationNone       Deduplication = "None"
	DeduplicationMeetingURL Deduplication = "MeetingURL"
)

// WarmWindow is a recurring window of warm capacity: from each time its schedule names, for
// duration, the pool keeps at least minIdle free slots ready.
type WarmWindow struct {
	// Schedule is when the window opens: a cron expression of five fields (minute hour
	// day-of-month month day-of-week, as in a Kubernetes CronJob) or one of @hourly, @daily,
	// @weekly, @monthly, @yearly, read in timeZone.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^(@(hourly|daily|midnight|weekly|monthly|yearly|annually)|[^ ]+( +[^ ]+){4})$')",message="schedule must be five cron fields (minute hour day-of-month month day-of-week) such as \"55 * * * 1-5\", or @hourly, @daily, @weekly, @monthly or @yearly"
	Schedule string `json:"schedule"`

	// Duration is how long the window stays open after each time of its schedule: 1m to 168h.
	// +required
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('168h'))",message="duration must be from 1m to 168h"
	Duration Duration `json:"duration"`

	// TimeZone is the IANA time zone the schedule is read in, such as Europe/Berlin; UTC when
	// unset. Daylight-saving changes follow the zone's wall clock, as a CronJob's do.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`
	// +kubebuilder:validation:XValidation:rule="self != 'Local'",message="timeZone must name a zone; Local would be the manager's own"
	TimeZone string `json:"timeZone,omitempty"`

	// MinIdle is the free, warm slots the pool keeps while the window is open.
	// +required
	// +kubebuilder:validation:Minimum=0
	MinIdle int32 `json:"minIdle"`
}

// UpdateStrategy bounds how a rollout takes ready standby slots away. A pool with standby
// Stopped updates its free slots in place without taking them away (a stopped slot has no
// container to replace), so there only maxSurge and the pacing of busy slots apply; with
// standby Running a free slot's container is replaced, and maxUnavailable bounds how many at
// once.
type UpdateStrategy struct {
	// MaxUnavailable is how far below minIdle the ready free slots may drop while a rollout
	// replaces their containers: a count, or a percent of minIdle (rounded down). The default 0
	// keeps minIdle slots ready throughout while surge slots can be made; where none can
	// (maxSurge 0, maxSlots reached, servers full) one slot at a time is replaced. Set by the
	// user.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnavailable must be a count >= 0 or a percent from 0% to 100% such as 25%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// MaxSurge is how many slots above the pool's size a rollout may add while slots are
	// replaced (never above maxSlots; they are removed when the rollout ends): a count, or a
	// percent of minIdle (rounded up). Default 25%. Set by the user.
	// +optional
	// +kubebuilder:default="25%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxSurge must be a count >= 0 or a percent from 0% to 100% such as 25%"
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
}

// MaxUnavailableOrDefault is MaxUnavailable with its default, for pools stored before the field
// existed.
func (u UpdateStrategy) MaxUnavailableOrDefault() intstr.IntOrString {
	if u.MaxUnavailable == nil {
		return intstr.FromInt32(DefaultMaxUnavailable)
	}
	return *u.MaxUnavailable
}

// MaxSurgeOrDefault is MaxSurge with its default, for pools stored before the field existed.
func (u UpdateStrategy) MaxSurgeOrDefault() intstr.IntOrString {
	if u.MaxSurge == nil {
		return intstr.FromString(DefaultMaxSurge)
	}
	return *u.MaxSurge
}

// CoolifyPlacement locates the slots' applications in Coolify.
//
// +kubebuilder:validation:XValidation:rule="has(self.environmentName) || has(self.environmentUUID)",message="set environmentName or environmentUUID (at least one)"
// +kubebuilder:validation:XValidation:rule="has(self.serverUUID) != has(self.servers)",message="set exactly one of serverUUID (one server) and servers (several)"
// +kubebuilder:validation:XValidation:rule="!has(self.servers) || !has(self.destinationUUID)",message="with servers, set destinationUUID on each server instead"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serverUUID) || !has(self.servers) || self.servers[0].uuid == oldSelf.serverUUID",message="switching from serverUUID to servers: list the old server first (its slots stay on it; cordon it to move them)"
type CoolifyPlacement struct {
	// CredentialsSecretRef names a Secret in the pool's namespace with the keys `url` (the
	// Coolify base URL, e.g. https://coolify.example.com) and `token` (an API token with the
	// read, write and deploy abilities). The Secret must carry the label
	// botpool.dev/allow-pool-use=true, or the pool stalls.
	// +required
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`

	// ProjectUUID is the Coolify project that holds the applications.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	ProjectUUID string `json:"projectUUID"`

	// ServerUUID is the Coolify server the containers run on (and whose image cache they
	// share), for a pool on one server; a pool on several lists them in servers instead.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	ServerUUID string `json:"serverUUID,omitempty"`

	// Servers spreads the pool over several Coolify servers of the same instance and user
	// (instead of serverUUID): new slots go where there is the most room for their weight,
	// binding prefers ready slots, and a cordoned server drains.
	// +optional
	// +listType=map
	// +listMapKey=uuid
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Servers []PoolServer `json:"servers,omitempty"`

	// EnvironmentName is the project environment, e.g. "production".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	EnvironmentName string `json:"environmentName,omitempty"`

	// EnvironmentUUID is the project environment by uuid; either it or environmentName is needed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	EnvironmentUUID string `json:"environmentUUID,omitempty"`

	// DestinationUUID picks the Docker network when the server has more than one destination.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	DestinationUUID string `json:"destinationUUID,omitempty"`
}

// PoolServer is one Coolify server of a pool spread over several.
type PoolServer struct {
	// UUID is the Coolify server's uuid.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	UUID string `json:"uuid"`

	// DestinationUUID picks the Docker network on this server when it has more than one.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	DestinationUUID string `json:"destinationUUID,omitempty"`

	// MaxSlots bounds the pool's slots on this server (a meeting bot holds about one CPU and
	// 2 GB, so a server holds a few dozen). Unset: only the pool's maxSlots bounds it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MaxSlots *int32 `json:"maxSlots,omitempty"`

	// Weight is the server's share of new slots against the other servers' (a server of
	// weight 2 gets twice the slots of one of weight 1, room allowing).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight,omitempty"`

	// Cordoned servers get no new slots and no new bots: their free slots are removed, and
	// their busy ones are removed as their bots end.
	// +optional
	Cordoned bool `json:"cordoned,omitempty"`
}

// ServerList returns the pool's servers: servers, or the lone serverUUID (with
// destinationUUID) as a list of one.
func (c *CoolifyPlacement) ServerList() []PoolServer {
	if len(c.Servers) > 0 {
		return c.Servers
	}
	return []PoolServer{{UUID: c.ServerUUID, DestinationUUID: c.DestinationUUID, Weight: 1}}
}

// Server returns the pool's server of the given uuid, and false when the pool does not list it
// (any more).
func (c *CoolifyPlacement) Server(uuid string) (PoolServer, bool) {
	for _, s := range c.ServerList() {
		if s.UUID == uuid {
			return s, true
		}
	}
	return PoolServer{}, false
}

// DefaultServer is the server of a slot that names none (created before slots recorded their
// server): the lone serverUUID, or the first of servers (switching from serverUUID to servers
// keeps the old server listed, and the pool records it on its slots before that).
func (c *CoolifyPlacement) DefaultServer() string {
	if c.ServerUUID != "" {
		return c.ServerUUID
	}
	if len(c.Servers) > 0 {
		return c.Servers[0].UUID
	}
	return ""
}

// SecretReference names a Secret in the referrer's namespace.
type SecretReference struct {
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SlotResources are container limits in Docker's notation, passed to Coolify as they are.
type SlotResources struct {
	// CPUs is the CPU limit, e.g. "1" or "1.5".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?$')",message="cpus must be a number of CPUs such as 1 or 1.5"
	CPUs string `json:"cpus,omitempty"`

	// Memory is the memory limit with a unit b, k, m or g, e.g. "2048m" or "2g".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+[bkmgBKMG]$')",message="memory must be a number with a unit b, k, m or g, such as 2048m or 2g"
	Memory string `json:"memory,omitempty"`
}

// MaxTenantStatuses is how many tenants a pool's status lists.
const MaxTenantStatuses = 32

// TenantStatus is one tenant's bots in a pool.
type TenantStatus struct {
	// Name is the tenant: a namespace, or a label value ("" for bots without the label).
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Bound is how many of its bots hold a slot of the pool (starting or running).
	Bound int32 `json:"bound"`
	// Waiting is how many of its bots wait in the pool's queue.
	Waiting int32 `json:"waiting"`
	// Limit is the most it may hold (its own, or the defaults'); unset when it has none.
	// +optional
	Limit *int32 `json:"limit,omitempty"`
	// Guaranteed is its guaranteed share.
	// +optional
	Guaranteed int32 `json:"guaranteed,omitempty"`
}

// QueuePolicy bounds how long bots wait for a slot.
//
// +kubebuilder:validation:XValidation:rule="!has(self.defaultTimeout) || !has(self.maxTimeout) || duration(self.defaultTimeout) <= duration(self.maxTimeout)",message="defaultTimeout must not exceed maxTimeout"
type QueuePolicy struct {
	// DefaultTimeout is how long a bot without its own queueTimeout waits before it fails
	// with QueueTimeout.
	// +optional
	// +kubebuilder:default="5m"
	DefaultTimeout Duration `json:"defaultTimeout,omitempty"`

	// MaxTimeout caps every bot's queueTimeout in this pool.
	// +optional
	// +kubebuilder:default="10m"
	MaxTimeout Duration `json:"maxTimeout,omitempty"`
}

// Timing holds the timers of the slot lifecycle and of bot liveness. Every value has a
// default; see the design's timing table for what each one guards against.
type Timing struct {
	// DeploymentPollInterval is how often a Deploying slot polls its deployment (±20% jitter).
	// +optional
	// +kubebuilder:default="15s"
	DeploymentPollInterval Duration `json:"deploymentPollInterval,omitempty"`

	// DeployGracePeriod is how long after a deploy an exited or stopped container is not yet
	// a failure (Coolify's status lags the container).
	// +optional
	// +kubebuilder:default="3m"
	DeployGracePeriod Duration `json:"deployGracePeriod,omitempty"`

	// DeploymentTimeout fails a deployment that has not finished by then.
	// +optional
	// +kubebuilder:default="25m"
	DeploymentTimeout Duration `json:"deploymentTimeout,omitempty"`

	// DeployingTimeout is when a slot stuck in Deploying is looked at again, heartbeat-aware:
	// a bot that still beats is never failed for a slow deployment.
	// +optional
	// +kubebuilder:default="15m"
	DeployingTimeout Duration `json:"deployingTimeout,omitempty"`

	// HeartbeatFreshness is how recent a heartbeat must be to count as proof of life when a
	// Deploying slot is stale.
	// +optional
	// +kubebuilder:default="5m"
	HeartbeatFreshness Duration `json:"heartbeatFreshness,omitempty"`

	// HeartbeatGracePeriod is the silence after which a bot's Alive condition turns False
	// (informational; it turns True again on the next beat).
	// +optional
	// +kubebuilder:default="30s"
	HeartbeatGracePeriod Duration `json:"heartbeatGracePeriod,omitempty"`

	// HeartbeatTimeout is the silence after which an active bot fails with HeartbeatTimeout.
	// +optional
	// +kubebuilder:default="5m"
	HeartbeatTimeout Duration `json:"heartbeatTimeout,omitempty"`

	// LeaveGracePeriod is how long a leaving bot gets before its container is stopped anyway.
	// +optional
	// +kubebuilder:default="15s"
	LeaveGracePeriod Duration `json:"leaveGracePeriod,omitempty"`

	// MaxSkippedRecoveries is how often a stale Deploying slot whose bot still beats is given
	// more time before it is declared Busy; 0 declares it Busy at once.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxSkippedRecoveries *int32 `json:"maxSkippedRecoveries,omitempty"`

	// MaxRecoveryAttempts is how many failed recoveries a slot in Error gets before its
	// application and the slot are deleted (the pool recreates slots on demand).
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxRecoveryAttempts int32 `json:"maxRecoveryAttempts,omitempty"`
}

// BotPoolStatus is what the pool controller observed.
type BotPoolStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Slots counts the pool's slots by phase.
	// +optional
	Slots *SlotCounts `json:"slots,omitempty"`

	// Tenants is, for a pool with a tenancy, each tenant's bots in the pool: those bound to
	// its slots and those waiting, with the tenant's limit and guaranteed share. At most 32
	// tenants: those held at their limit with bots waiting first, then the busiest; tenantCount
	// says how many there are in all.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Tenants []TenantStatus `json:"tenants,omitempty"`

	// TenantCount is how many tenants have bots bound to the pool's slots or waiting for one.
	// +optional
	TenantCount int32 `json:"tenantCount,omitempty"`

	// Queued is the number of bots of this pool waiting for a slot.
	// +optional
	Queued int32 `json:"queued,omitempty"`

	// MinIdle is the minIdle in force: spec.minIdle, or more while a warmSchedule window is
	// open. The scale subresource reports it as the pool's replicas.
	// +optional
	MinIdle int32 `json:"minIdle"`

	// SurplusSince is when the pool last began to hold more free slots than it needs (the
	// minIdle in force, windows opening within scaleDownDelay, and the waiting bots); the
	// surplus is removed once it has lasted scaleDownDelay. Unset while there is none.
	// Written by the pool controller only.
	// +optional
	SurplusSince *metav1.Time `json:"surplusSince,omitempty"`

	// Reservations is what the pool holds and warms for its bots' granted reservations;
	// absent while it has none pending. Written by the pool controller only.
	// +optional
	Reservations *ReservationStatus `json:"reservations,omitempty"`

	// WarmWindows names the warmSchedule windows open now (their index and schedule).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	WarmWindows []string `json:"warmWindows,omitempty"`

	// Selector is the label selector of the pool's slots (botpool.dev/pool=<name>), for the
	// scale subresource: an HPA requires one.
	// +optional
	// +kubebuilder:validation:MaxLength=320
	Selector string `json:"selector,omitempty"`

	// Servers shows the pool's slots on each of its servers, and on servers it no longer
	// lists while their slots drain.
	// +optional
	// +listType=map
	// +listMapKey=uuid
	Servers []ServerStatus `json:"servers,omitempty"`

	// Conditions: Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// TemplateHash identifies the slot template the pool rolls out now: a hash of image,
	// imageTag, resources, the slotEnvFrom Secret's content, the bot API URL and the
	// botpool.dev/restartedAt annotation. A slot whose status.templateHash equals it is up to
	// date. Written by the pool controller only.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TemplateHash string `json:"templateHash,omitempty"`

	// TemplateImage is the image reference (image:tag) of that template, the one pre-pulled on
	// every server before a slot is given it. Written by the pool controller only.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	TemplateImage string `json:"templateImage,omitempty"`

	// UpdatedSlots counts the pool's slots built from the current template (their
	// status.templateHash equals templateHash); equal to slots.total when no rollout is left.
	// Written by the pool controller only.
	// +optional
	UpdatedSlots int32 `json:"updatedSlots"`

	// Rollout is present while a rollout runs: when it began and how many slots the pool had
	// then (slots it added above that to surge are removed at the end). Written by the pool
	// controller only.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// ReservationMode says whether a pool's scheduled bots reserve slots.
// +kubebuilder:validation:Enum=Reserve;None
type ReservationMode string

const (
	// ReservationsReserve: a bot with a startTime at least minLead ahead holds a slot for its
	// start (the condition Reserved says so, or why not), which ad-hoc bots are kept off and
	// the pool warms in time.
	ReservationsReserve ReservationMode = "Reserve"
	// ReservationsNone: no reservations; a scheduled bot joins the queue the manager's
	// --schedule-lead before its start, beside ad-hoc bots, and gets no Reserved condition.
	ReservationsNone ReservationMode = "None"
)

// DefaultReservationMinLead is how far ahead of its start a bot must be created to be
// reserved, unless the pool says otherwise: hosted meeting-bot services promise that a bot
// scheduled ten minutes ahead joins on time.
const DefaultReservationMinLead = 10 * time.Minute

// ReservationPolicy is a pool's spec.reservations.
type ReservationPolicy struct {
	// Mode is Reserve (the default) or None.
	// +optional
	// +kubebuilder:default=Reserve
	Mode ReservationMode `json:"mode,omitempty"`
	// MinLead is how far ahead of its startTime a bot must be created to be reserved (10m
	// unset); a bot created later gets Reserved False, TooLate. Shorter than the pool's warm
	// lead (status.reservations.lead) leaves a late reservation's slot to be built after it
	// was promised, and so possibly late.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('168h'))",message="minLead must be from 1m to 168h"
	MinLead Duration `json:"minLead,omitempty"`
	// MaxHorizon is how far ahead a reservation may be decided (7 days unset): a bot whose
	// startTime is further away says Reserved False, BeyondHorizon, and its reservation is
	// decided when its start comes within the horizon. No tenant can hold the pool's slots
	// for next year's meetings today.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1h') && duration(self) <= duration('8760h'))",message="maxHorizon must be from 1h to 8760h (a year)"
	MaxHorizon Duration `json:"maxHorizon,omitempty"`
}

// DefaultReservationMaxHorizon is how far ahead a reservation may be decided when the pool
// does not say (spec.reservations.maxHorizon).
const DefaultReservationMaxHorizon = 7 * 24 * time.Hour

// Horizon is the policy's maxHorizon, or the default.
func (p *ReservationPolicy) Horizon() time.Duration {
	if p == nil {
		return DefaultReservationMaxHorizon
	}
	return p.MaxHorizon.OrDefault(DefaultReservationMaxHorizon)
}

// Reserves reports whether the pool's scheduled bots reserve slots (a nil policy does).
func (p *ReservationPolicy) Reserves() bool { return p == nil || p.Mode != ReservationsNone }

// Lead is the policy's minLead, or the default.
func (p *ReservationPolicy) Lead() time.Duration {
	if p == nil {
		return DefaultReservationMinLead
	}
	return p.MinLead.OrDefault(DefaultReservationMinLead)
}

// ReservationStatus is what the pool does for its bots' granted reservations (a Bot with a
// startTime at least ten minutes ahead and the condition Reserved True).
type ReservationStatus struct {
	// Pending counts the pool's bots with a granted reservation that are not bound yet.
	// +kubebuilder:validation:Minimum=0
	Pending int32 `json:"pending"`
	// Warming counts those whose start is within lead: the pool keeps a free slot for each
	// of them (a Ready standby one in a Running pool) besides its minIdle and queue.
	// +kubebuilder:validation:Minimum=0
	Warming int32 `json:"warming"`
	// Lead is how long before its start a reservation's slot is begun, for the pending
	// reservations all together: the image's pull on a server that lacks it, then the
	// standby starts the servers run a few at a time, each as long as the pool observed
	// (servers[].cached[].pullDuration and servers[].slotStart), plus a margin.
	Lead metav1.Duration `json:"lead"`
	// NextStart is the earliest start of a pending reservation.
	// +optional
	NextStart *metav1.Time `json:"nextStart,omitempty"`
}

// RolloutStatus is the bookkeeping of a rollout in progress.
type RolloutStatus struct {
	// StartedAt is when the pool's template last changed to the one rolled out now.
	StartedAt metav1.Time `json:"startedAt"`
	// BaseSlots is the pool's slot count when the rollout began: at its end, free updated slots
	// above max(baseSlots, what the pool needs then) are removed.
	// +kubebuilder:validation:Minimum=0
	BaseSlots int32 `json:"baseSlots"`
}

// ServerState is how the pool treats one of its servers.
// +kubebuilder:validation:Enum=Active;Cordoned;Unlisted
type ServerState string

const (
	// ServerActive: the server takes new slots and bots.
	ServerActive ServerState = "Active"
	// ServerCordoned: spec.coolify.servers marks it cordoned: no new slots or bots, its
	// slots drain.
	ServerCordoned ServerState = "Cordoned"
	// ServerUnlisted: the pool no longer lists the server, and slots remain on it: they
	// drain like a cordoned server's.
	ServerUnlisted ServerState = "Unlisted"
)

// ServerHealth is what Coolify last said of a server's health (GET /servers), and what the
// pool's own starts there saw.
// +kubebuilder:validation:Enum=Healthy;Unreachable;Unusable;NotFound;Failing;Unknown
type ServerHealth string

const (
	// ServerHealthy: Coolify reports the server reachable and usable (or does not say).
	ServerHealthy ServerHealth = "Healthy"
	// ServerUnreachable: Coolify cannot reach the server (is_reachable false). Its free
	// slots are not offered and new slots go elsewhere until it is back.
	ServerUnreachable ServerHealth = "Unreachable"
	// ServerUnusable: Coolify reaches the server but cannot use it (is_usable false: no
	// Docker, say). Treated as Unreachable.
	ServerUnusable ServerHealth = "Unusable"
	// ServerNotFound: Coolify answered the list of servers, and the pool's token does not see
	// this one (a wrong uuid, a server deleted in Coolify, or another team's). No slot can be
	// created there: treated as Unreachable.
	ServerNotFound ServerHealth = "NotFound"
	// ServerFailing: Coolify reports the server functional, but the pool's last starts there
	// failed in a row (deployments failed or lost) while another of its servers took bots.
	// Treated as Unreachable for this pool only, until a while after the last failure.
	ServerFailing ServerHealth = "Failing"
	// ServerHealthUnknown: the servers were not read yet (or the read failed). Treated as
	// Healthy: a missing answer never takes a server out.
	ServerHealthUnknown ServerHealth = "Unknown"
)

// Out reports whether the health keeps bots and new slots off the server.
func (h ServerHealth) Out() bool {
	switch h {
	case ServerUnreachable, ServerUnusable, ServerNotFound, ServerFailing:
		return true
	}
	return false
}

// ServerStatus is what the pool observed of its slots on one server.
type ServerStatus struct {
	// UUID is the Coolify server's uuid.
	UUID string `json:"uuid"`
	// State is how the pool treats the server.
	State ServerState `json:"state"`
	// Health is what Coolify last said of the server.
	// +optional
	Health ServerHealth `json:"health,omitempty"`
	// Slots counts the pool's slots on the server.
	Slots int32 `json:"slots"`
	// Free counts the slots a bot can be bound to now (Idle, unbound; Ready in a standby
	// pool), zero on a server that is not Active or whose health is out.
	Free int32 `json:"free"`
	// Busy counts the slots running a bot.
	Busy int32 `json:"busy"`
	// MaxSlots repeats the server's bound, when it has one.
	// +optional
	MaxSlots *int32 `json:"maxSlots,omitempty"`

	// SlotStart is the longest status.lastDeployDuration among the pool's slots on this
	// server: how long a container of the pool takes to start there (a standby start in a
	// Running pool). Reservations are warmed ahead by it. Written by the pool controller only.
	// +optional
	SlotStart *metav1.Duration `json:"slotStart,omitempty"`

	// PullDuration is how long the pool's last finished pre-pull on this server took. It
	// stays when that pull's entry leaves cached (a restartedAt: the tag is pulled again), so
	// the reservation lead still counts the pull it waits for by the last one observed.
	// Written by the pool controller only.
	// +optional
	PullDuration *metav1.Duration `json:"pullDuration,omitempty"`

	// Cached lists the image references the pool knows are pulled on this server, newest
	// first (at most 3): a slot is given an image only once it is listed here, so no bot waits
	// for a cold pull. Written by the pool controller only, from its pre-pulls.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	Cached []CachedImage `json:"cached,omitempty"`

	// Pull is the pool's pre-pull of its template image on this server that is in flight or
	// last failed; absent once it finished (the image is then in cached). Written by the pool
	// controller only.
	// +optional
	Pull *ImagePull `json:"pull,omitempty"`
}

// CachedImage is an image reference a pre-pull finished on a server.
type CachedImage struct {
	// Image is the reference pulled, image:tag.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// PulledAt is when the pull finished. The pull is repeated once a scheduled run of the
	// server's Docker cleanup may have removed the image since, and when it is 24 hours old.
	PulledAt metav1.Time `json:"pulledAt"`
	// RestartedAt is the pool's botpool.dev/restartedAt annotation the pull ran under: a new
	// value pulls the same reference again (a new push of the same tag).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RestartedAt string `json:"restartedAt,omitempty"`
	// PullDuration is how long the pull took, from its request until it finished: the cold
	// pull a reservation's slot on a server without the image waits for.
	// +optional
	PullDuration *metav1.Duration `json:"pullDuration,omitempty"`
}

// ImagePullState is where a server's pre-pull is.
// +kubebuilder:validation:Enum=Pulling;Failed
type ImagePullState string

const (
	// ImagePulling: the pre-pull's deployment runs on the server.
	ImagePulling ImagePullState = "Pulling"
	// ImagePullFailed: the pre-pull failed (an unknown tag, a registry that wants a login); it
	// is retried after a while, and the rollout waits.
	ImagePullFailed ImagePullState = "Failed"
)

// ImagePull is a pre-pull of the pool's template image on one server: a deployment of the
// pool's puller application there, whose container exits at once.
type ImagePull struct {
	// Image is the reference being pulled, image:tag.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// State is Pulling while the deployment runs, Failed when it failed.
	State ImagePullState `json:"state"`
	// ApplicationUUID is the puller application on this server (found again by its name when
	// missing).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ApplicationUUID string `json:"applicationUUID,omitempty"`
	// DeploymentUUID is the puller's deployment in flight or last failed.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DeploymentUUID string `json:"deploymentUUID,omitempty"`
	// RestartedAt is the pool's botpool.dev/restartedAt annotation the pull runs under (it is
	// recorded in cached when the pull finishes): a pull under another value is superseded,
	// and a failed one is retried at once when the value changes.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RestartedAt string `json:"restartedAt,omitempty"`
	// Since is when the pull was requested, or when it failed.
	Since metav1.Time `json:"since"`
	// Failures counts the pulls of this image (under this restartedAt) on the server that
	// failed in a row: the next is tried 2 minutes after a first failure, twice as long after
	// each further one, at most 30 minutes, so a pull that cannot succeed (a tag the registry
	// lacks, a deploymentTimeout shorter than the pull) does not hold a build of the server
	// most of the time. A standby pool whose server holds no other image of it retries every
	// 2 minutes: its standby containers there wait for this pull.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Failures int32 `json:"failures,omitempty"`
	// Message says why a failed pull failed, with Coolify's last log line when the token may
	// read it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// StandbyMode is what a free slot's container does: see BotPoolSpec.Standby.
// +kubebuilder:validation:Enum=Stopped;Running
type StandbyMode string

const (
	// StandbyStopped: a free slot has no container; a bot's start is a deployment.
	StandbyStopped StandbyMode = "Stopped"
	// StandbyRunning: a free slot keeps a container waiting for its binding.
	StandbyRunning StandbyMode = "Running"
)

// Running reports whether free slots keep their containers running ("" is Stopped, the
// default, as on pools written before the field existed).
func (m StandbyMode) Running() bool { return m == StandbyRunning }

// SlotCounts counts slots by phase.
type SlotCounts struct {
	Total     int32 `json:"total"`
	Creating  int32 `json:"creating,omitempty"`
	Idle      int32 `json:"idle"`
	Deploying int32 `json:"deploying,omitempty"`
	Busy      int32 `json:"busy"`
	Releasing int32 `json:"releasing,omitempty"`
	Error     int32 `json:"error,omitempty"`
	// Ready counts the free slots whose standby container asked for work lately: the ones a
	// bot starts on at once (pools with standby Running).
	Ready int32 `json:"ready,omitempty"`
	// Starting counts the free slots whose fresh standby container is being deployed or has
	// not asked for work yet.
	Starting int32 `json:"starting,omitempty"`
}

// BotPool is a warm pool of identical Coolify applications (slots) for one meeting platform.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.minIdle,statuspath=.status.minIdle,selectorpath=.status.selector
// +kubebuilder:resource:shortName=bp;pool,categories=meetingbots
// +kubebuilder:printcolumn:name="Platform",type=string,JSONPath=`.spec.platform`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxSlots`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.slots.total`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedSlots`
// +kubebuilder:printcolumn:name="Idle",type=integer,JSONPath=`.status.slots.idle`
// +kubebuilder:printcolumn:name="Busy",type=integer,JSONPath=`.status.slots.busy`
// +kubebuilder:printcolumn:name="Standby",type=integer,JSONPath=`.status.slots.ready`
// +kubebuilder:printcolumn:name="MinIdle",type=integer,JSONPath=`.status.minIdle`
// +kubebuilder:printcolumn:name="Queued",type=integer,JSONPath=`.status.queued`
// +kubebuilder:printcolumn:name="Tenants",type=integer,JSONPath=`.status.tenantCount`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Tag",type=string,JSONPath=`.spec.imageTag`,priority=1
// +kubebuilder:printcolumn:name="Deploying",type=integer,JSONPath=`.status.slots.deploying`,priority=1
// +kubebuilder:printcolumn:name="Error",type=integer,JSONPath=`.status.slots.error`,priority=1
// +kubebuilder:printcolumn:name="Reserved",type=integer,JSONPath=`.status.reservations.pending`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BotPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BotPoolSpec `json:"spec"`
	// +optional
	Status BotPoolStatus `json:"status,omitempty"`
}

// BotPoolList is a list of BotPools.
//
// +kubebuilder:object:root=true
type BotPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BotPool `json:"items"`
}

// SkipLimit is MaxSkippedRecoveries with its default.
func (t Timing) SkipLimit() int32 {
	if t.MaxSkippedRecoveries == nil {
		return DefaultMaxSkippedRecoveries
	}
	return *t.MaxSkippedRecoveries
}

// Reasons of the pool's and its slots' conditions about deletion and the Coolify instance.
const (
	// ReasonDraining: the pool is being deleted and waits for its running bots to leave.
	ReasonDraining = "Draining"
	// ReasonCoolifyInstanceChanged: the credentials Secret names another Coolify instance
	// than the one holding the pool's applications.
	ReasonCoolifyInstanceChanged = "CoolifyInstanceChanged"
)
