package botpooltest

import (
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Scheme is a scheme with the built-in kinds and botpool's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1.AddToScheme(s))
	return s
}

// PoolWrapper builds a BotPool.
type PoolWrapper struct{ v1.BotPool }

// MakePool is a Zoom pool of image ghcr.io/example/bot with credentials Secret "coolify", as
// a user would write it before the API server fills in defaults.
func MakePool(ns, name string) *PoolWrapper {
	return &PoolWrapper{v1.BotPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.BotPoolSpec{
			Platform: v1.PlatformZoom,
			Image:    "ghcr.io/example/bot",
			Coolify:  v1.CoolifyPlacement{CredentialsSecretRef: v1.SecretReference{Name: "coolify"}},
		},
	}}
}

// Obj returns the pool.
func (w *PoolWrapper) Obj() *v1.BotPool { return &w.BotPool }

func (w *PoolWrapper) UID(uid types.UID) *PoolWrapper { w.ObjectMeta.UID = uid; return w }
func (w *PoolWrapper) Platform(p v1.Platform) *PoolWrapper {
	w.Spec.Platform = p
	return w
}
func (w *PoolWrapper) Image(image, tag string) *PoolWrapper {
	w.Spec.Image, w.Spec.ImageTag = image, tag
	return w
}
func (w *PoolWrapper) MaxSlots(n int32) *PoolWrapper { w.Spec.MaxSlots = n; return w }
func (w *PoolWrapper) MinIdle(n int32) *PoolWrapper  { w.Spec.MinIdle = n; return w }
func (w *PoolWrapper) MaxConcurrentDeployments(n int32) *PoolWrapper {
	w.Spec.MaxConcurrentDeployments = n
	return w
}

// Servers spreads the pool over these servers (spec.coolify.servers, weight 1 each) instead of
// a lone serverUUID.
func (w *PoolWrapper) Servers(uuids ...string) *PoolWrapper {
	w.Spec.Coolify.ServerUUID, w.Spec.Coolify.Servers = "", nil
	for _, u := range uuids {
		w.Spec.Coolify.Servers = append(w.Spec.Coolify.Servers, v1.PoolServer{UUID: u, Weight: 1})
	}
	return w
}

// Placement sets where the pool's applications go in Coolify.
func (w *PoolWrapper) Placement(projectUUID, serverUUID, environment string) *PoolWrapper {
	c := &w.Spec.Coolify
	c.ProjectUUID, c.ServerUUID, c.EnvironmentName = projectUUID, serverUUID, environment
	return w
}

// Credentials names the Secret with the pool's Coolify URL and token.
func (w *PoolWrapper) Credentials(secret string) *PoolWrapper {
	w.Spec.Coolify.CredentialsSecretRef = v1.SecretReference{Name: secret}
	return w
}
func (w *PoolWrapper) Queue(defaultTimeout, maxTimeout v1.Duration) *PoolWrapper {
	w.Spec.Queue = v1.QueuePolicy{DefaultTimeout: defaultTimeout, MaxTimeout: maxTimeout}
	return w
}
func (w *PoolWrapper) Timing(t v1.Timing) *PoolWrapper { w.Spec.Timing = t; return w }
func (w *PoolWrapper) Standby(m v1.StandbyMode) *PoolWrapper {
	w.Spec.Standby = m
	return w
}

// Template sets the template the pool's status names (status.templateHash, templateImage).
func (w *PoolWrapper) Template(hash, image string) *PoolWrapper {
	w.Status.TemplateHash, w.Status.TemplateImage = hash, image
	return w
}

// Cached records in the pool's status that a pre-pull of image (image:tag) finished on the
// server at the given time, under the restartedAt annotation restarted.
func (w *PoolWrapper) Cached(server, image, restarted string, at time.Time) *PoolWrapper {
	for i := range w.Status.Servers {
		if st := &w.Status.Servers[i]; st.UUID == server {
			st.Cached = append([]v1.CachedImage{{Image: image, PulledAt: metav1.NewTime(at), RestartedAt: restarted}}, st.Cached...)
			return w
		}
	}
	w.Status.Servers = append(w.Status.Servers, v1.ServerStatus{UUID: server, State: v1.ServerActive,
		Cached: []v1.CachedImage{{Image: image, PulledAt: metav1.NewTime(at), RestartedAt: restarted}}})
	return w
}

// PullFailed records in the pool's status that its pre-pull of image (image:tag) on the
// server failed at the given time, the failures-th in a row.
func (w *PoolWrapper) PullFailed(server, image string, failures int32, at time.Time) *PoolWrapper {
	pull := &v1.ImagePull{Image: image, State: v1.ImagePullFailed, Since: metav1.NewTime(at), Failures: failures,
		Message: "Pulling " + image + " on server " + server + " failed"}
	for i := range w.Status.Servers {
		if st := &w.Status.Servers[i]; st.UUID == server {
			st.Pull = pull
			return w
		}
	}
	w.Status.Servers = append(w.Status.Servers, v1.ServerStatus{UUID: server, State: v1.ServerActive, Pull: pull})
	return w
}

// Annotate sets an annotation on the pool.
func (w *PoolWrapper) Annotate(key, value string) *PoolWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[key] = value
	return w
}

// ParameterDefaults sets spec.parameterDefaults to the JSON object raw.
func (w *PoolWrapper) ParameterDefaults(raw string) *PoolWrapper {
	w.Spec.ParameterDefaults = &apiextensionsv1.JSON{Raw: []byte(raw)}
	return w
}

// Deduplication sets spec.deduplication.
func (w *PoolWrapper) Deduplication(d v1.Deduplication) *PoolWrapper {
	w.Spec.Deduplication = d
	return w
}

// SlotEnvFrom names the Secret whose keys every slot's containers get as env variables.
// SharedWith admits the namespaces whose labels match (spec.allowedNamespaces from Selector);
// with no labels, every namespace (from All).
func (w *PoolWrapper) SharedWith(labels map[string]string) *PoolWrapper {
	w.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesAll}
	if len(labels) > 0 {
		w.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesSelector, Selector: &metav1.LabelSelector{MatchLabels: labels}}
	}
	return w
}

func (w *PoolWrapper) SlotEnvFrom(secret string) *PoolWrapper {
	w.Spec.SlotEnvFrom = &v1.SecretReference{Name: secret}
	return w
}

// BotWrapper builds a Bot.
type BotWrapper struct{ v1.Bot }

// MakeBot is a bot for a Zoom meeting named after it, with no pool.
func MakeBot(ns, name string) *BotWrapper {
	return &BotWrapper{v1.Bot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.BotSpec{MeetingURL: "https://zoom.us/j/" + name},
	}}
}

// Obj returns the bot.
func (w *BotWrapper) Obj() *v1.Bot { return &w.Bot }

func (w *BotWrapper) UID(uid types.UID) *BotWrapper { w.ObjectMeta.UID = uid; return w }
func (w *BotWrapper) Finalizers(f ...string) *BotWrapper {
	w.ObjectMeta.Finalizers = f
	return w
}
func (w *BotWrapper) MeetingURL(u string) *BotWrapper { w.Spec.MeetingURL = u; return w }
func (w *BotWrapper) DisplayName(n string) *BotWrapper {
	w.Spec.DisplayName = n
	return w
}

// PoolRef asks for the named pool (spec.poolRef).
func (w *BotWrapper) PoolRef(pool string) *BotWrapper {
	w.Spec.PoolRef = &v1.PoolReference{Name: pool}
	return w
}

// PoolIn asks for the named pool of another namespace (spec.poolRef with its namespace).
func (w *BotWrapper) PoolIn(namespace, pool string) *BotWrapper {
	w.Spec.PoolRef = &v1.PoolReference{Namespace: namespace, Name: pool}
	return w
}
func (w *BotWrapper) Priority(p int32) *BotWrapper { w.Spec.Priority = p; return w }
func (w *BotWrapper) MaxDuration(d v1.Duration) *BotWrapper {
	w.Spec.MaxDuration = d
	return w
}
func (w *BotWrapper) Created(t time.Time) *BotWrapper {
	w.CreationTimestamp = metav1.NewTime(t)
	return w
}
func (w *BotWrapper) CallbackURL(u string) *BotWrapper { w.Spec.CallbackURL = u; return w }
func (w *BotWrapper) Phase(p v1.BotPhase) *BotWrapper  { w.Status.Phase = p; return w }
func (w *BotWrapper) FinishedAt(t time.Time) *BotWrapper {
	at := metav1.NewTime(t)
	w.Status.FinishedAt = &at
	return w
}

// Parameters sets spec.parameters to the JSON object raw.
func (w *BotWrapper) Parameters(raw string) *BotWrapper {
	w.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(raw)}
	return w
}

// SecretParameter adds a secret parameter: name from key of Secret secret.
func (w *BotWrapper) SecretParameter(name, secret, key string) *BotWrapper {
	w.Spec.SecretParameters = append(w.Spec.SecretParameters,
		v1.SecretParameter{Name: name, SecretKeyRef: v1.SecretKeyReference{Name: secret, Key: key}})
	return w
}

// DeduplicationKey sets spec.deduplicationKey.
func (w *BotWrapper) DeduplicationKey(k string) *BotWrapper { w.Spec.DeduplicationKey = k; return w }

// InPool sets the pool the Bot controller resolved (status.pool).
func (w *BotWrapper) InPool(pool string) *BotWrapper { w.Status.Pool = pool; return w }

// InPoolOf sets the pool of another namespace the Bot controller resolved (status.pool and
// status.poolNamespace).
func (w *BotWrapper) InPoolOf(namespace, pool string) *BotWrapper {
	w.Status.Pool, w.Status.PoolNamespace = pool, namespace
	return w
}

// OnSlot sets the slot and application the bot runs in, as the Bot controller mirrors them.
func (w *BotWrapper) OnSlot(slot, appUUID string) *BotWrapper {
	w.Status.SlotName, w.Status.ApplicationUUID = slot, appUUID
	return w
}
func (w *BotWrapper) StartedAt(t time.Time) *BotWrapper {
	at := metav1.NewTime(t)
	w.Status.StartedAt = &at
	return w
}

// Grant gives b a reservation in its pool (status.pool, else "pool") from start for its
// maxDuration, as the Bot controller records one: the Reserved condition and
// status.reservation.
func Grant(b *v1.Bot, start time.Time) {
	pool := b.Status.Pool
	if pool == "" {
		pool = "pool"
	}
	b.Spec.StartTime = &metav1.Time{Time: start}
	b.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReserved, Status: metav1.ConditionTrue, Reason: v1.ReasonCapacityReserved}}
	b.Status.Reservation = &v1.BotReservation{Pool: pool, From: metav1.Time{Time: start},
		Until: metav1.Time{Time: start.Add(b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration))}}
}

// SlotWrapper builds a BotPoolSlot.
type SlotWrapper struct{ v1.BotPoolSlot }

// MakeSlot is a slot of pool, with no phase, binding or application yet.
func MakeSlot(ns, name, pool string) *SlotWrapper {
	return &SlotWrapper{v1.BotPoolSlot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.BotPoolSlotSpec{Pool: pool},
	}}
}

// Obj returns the slot.
func (w *SlotWrapper) Obj() *v1.BotPoolSlot { return &w.BotPoolSlot }

func (w *SlotWrapper) UID(uid types.UID) *SlotWrapper { w.ObjectMeta.UID = uid; return w }
func (w *SlotWrapper) Finalizers(f ...string) *SlotWrapper {
	w.ObjectMeta.Finalizers = f
	return w
}

// Deleting marks the slot deleted at t (it needs a finalizer for a fake client to keep it).
func (w *SlotWrapper) Deleting(t time.Time) *SlotWrapper {
	at := metav1.NewTime(t)
	w.DeletionTimestamp = &at
	return w
}

// BoundTo binds the slot to a bot (spec.botRef).
func (w *SlotWrapper) BoundTo(bot string, uid types.UID) *SlotWrapper {
	w.Spec.BotRef = &v1.BotReference{Name: bot, UID: uid}
	return w
}

func (w *SlotWrapper) Generation(g int64) *SlotWrapper   { w.ObjectMeta.Generation = g; return w }
func (w *SlotWrapper) Phase(p v1.SlotPhase) *SlotWrapper { w.Status.Phase = p; return w }

// ObservedGeneration sets the generation the last handled pass saw.
func (w *SlotWrapper) ObservedGeneration(g int64) *SlotWrapper {
	w.Status.ObservedGeneration = g
	return w
}

// Since sets when the slot entered its phase (status.phaseSince).
func (w *SlotWrapper) Since(t time.Time) *SlotWrapper {
	at := metav1.NewTime(t)
	w.Status.PhaseSince = &at
	return w
}
func (w *SlotWrapper) App(uuid string) *SlotWrapper { w.Status.ApplicationUUID = uuid; return w }

// Server places the slot on a server (spec.server).
func (w *SlotWrapper) Server(uuid string) *SlotWrapper { w.Spec.Server = uuid; return w }

// Template sets the template and image the slot's application was last given.
func (w *SlotWrapper) Template(hash, image string) *SlotWrapper {
	w.Status.TemplateHash, w.Status.Image = hash, image
	return w
}

// Standby sets the state of the slot's standby container, since the given time.
func (w *SlotWrapper) Standby(state v1.StandbyState, since time.Time) *SlotWrapper {
	at := metav1.NewTime(since)
	w.Status.Standby, w.Status.StandbySince = state, &at
	return w
}

// Annotate sets an annotation on the slot.
func (w *SlotWrapper) Annotate(key, value string) *SlotWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[key] = value
	return w
}

// Token sets the hash of the slot's bot API token.
func (w *SlotWrapper) Token(sha256 string) *SlotWrapper { w.Status.TokenSHA256 = sha256; return w }

// Deployment sets the deployment the slot follows and when its deploy was requested.
func (w *SlotWrapper) Deployment(uuid string, since time.Time) *SlotWrapper {
	at := metav1.NewTime(since)
	w.Status.DeploymentUUID, w.Status.DeployingSince = uuid, &at
	return w
}
func (w *SlotWrapper) Reason(reason, message string) *SlotWrapper {
	w.Status.Reason, w.Status.Message = reason, message
	return w
}

// WebhookKey is the signing key WebhookSecret holds (standard-webhooks' whsec_ form).
const WebhookKey = "whsec_c2VjcmV0LWtleQ=="

// WebhookSecret is a Secret holding WebhookKey under "secret", opted in for webhook signing
// (the botpool.dev/allow-webhook-signing label) when labelled.
func WebhookSecret(ns, name string, labelled bool) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{"secret": []byte(WebhookKey)}}
	if labelled {
		s.Labels = map[string]string{v1.LabelAllowWebhookSigning: "true"}
	}
	return s
}

// ParameterSecret is a Secret holding data, opted in for bot parameters (the
// botpool.dev/allow-bot-parameters label) when labelled.
func ParameterSecret(ns, name string, labelled bool, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	if labelled {
		s.Labels = map[string]string{v1.LabelAllowBotParameters: "true"}
	}
	return s
}
