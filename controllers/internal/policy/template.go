package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// The slot template: what a slot's application is built from, hashed so that a pool and its
// slots can tell in one string comparison whether a slot is up to date (the pool's
// status.templateHash against the slot's). Pure functions, shared by the pool and the slot
// controllers; the rollout's arithmetic (RolloutBudget) lives here too.

// SlotTemplate is everything of a pool that reaches its slots' applications and can change
// after they were created. Server and destination are left out (a slot never changes its
// server), and so are standby mode, timings and description: switching modes has its own
// mechanism, and the others are not part of the container.
type SlotTemplate struct {
	Image string // spec.image
	Tag   string // spec.imageTag, "" read as "latest"
	// CPUs and Memory are spec.resources, in Docker's notation; "" is unlimited.
	CPUs, Memory string
	// EnvDigest is SecretDigest of the slotEnvFrom Secret's data; "" without slotEnvFrom (or
	// with an empty Secret: the same environment).
	EnvDigest string
	// APIURL is the bot API URL the slots' containers are given (the manager's --bot-api-url).
	APIURL string
	// RestartedAt is the pool's botpool.dev/restartedAt annotation: a new value is a new
	// template with the same image, so a new push of the same tag is pulled and rolled out.
	RestartedAt string
}

// PoolTemplate is the template a pool asks for now, given its slotEnvFrom Secret's digest and
// the manager's bot API URL (neither is in the pool object).
func PoolTemplate(pool *v1.BotPool, envDigest, apiURL string) SlotTemplate {
	return SlotTemplate{
		Image:       pool.Spec.Image,
		Tag:         pool.Spec.ImageTag,
		CPUs:        pool.Spec.Resources.CPUs,
		Memory:      pool.Spec.Resources.Memory,
		EnvDigest:   envDigest,
		APIURL:      apiURL,
		RestartedAt: RestartedAt(pool), // as the pulls record it: the two must agree
	}
}

// EffectiveTag is Tag with Coolify's and Docker's reading of an empty tag.
func (t SlotTemplate) EffectiveTag() string { return TagOrLatest(t.Tag) }

// Ref is the template's image reference, image:tag: what a server pulls, and what the pool's
// status.templateImage and servers[].cached name.
func (t SlotTemplate) Ref() string { return t.Image + ":" + t.EffectiveTag() }

// templateHashPrefix versions the hash. A change to how existing fields are hashed must take a
// new prefix, and rolls every pool once; a new field does not need one (see Hash).
const templateHashPrefix = "t1-"

// Hash identifies the template: "t1-" and the first 16 hex digits of a SHA-256 over the
// fields that are set, each framed with its name and length in a fixed order, so that no two
// templates share an input (a value cannot run into the next field). A field added later is
// hashed only when set, so an operator upgrade that adds one leaves every existing pool's hash
// as it was and rolls nothing.
func (t SlotTemplate) Hash() string {
	h := sha256.New()
	for _, f := range []struct{ name, value string }{
		{"image", t.Image},
		{"tag", t.EffectiveTag()},
		{"cpus", t.CPUs},
		{"memory", t.Memory},
		{"env", t.EnvDigest},
		{"apiURL", t.APIURL},
		{"restartedAt", t.RestartedAt},
		// New fields go here, at the end, and only ever hashed when non-empty.
	} {
		if f.value != "" {
			_, _ = fmt.Fprintf(h, "%s=%d:%s;", f.name, len(f.value), f.value)
		}
	}
	return templateHashPrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// SecretDigest is a SHA-256 (hex) of a Secret's data: keys sorted, each key and value framed
// with its length, so that {"a": "bc"} and {"ab": "c"} differ. It hashes content, not the
// Secret's resourceVersion, so a label edit or a restore of the same data rolls nothing. An
// empty or missing Secret gives "": it adds no variable, the same environment as none.
func SecretDigest(data map[string][]byte) string {
	if len(data) == 0 {
		return ""
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		_, _ = fmt.Fprintf(h, "%d:%s=%d:", len(k), k, len(data[k]))
		_, _ = h.Write(data[k])
		_, _ = h.Write([]byte{';'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// floatingTags are tags that registries and CI pipelines conventionally move to newer images.
var floatingTags = []string{"latest", "main", "master", "stable", "edge", "nightly", "dev", "develop"}

// FloatingTag reports whether tag is one registries move ("" is latest): any deployment of it,
// a bot's start included, may pull a new image cold. Tags are compared without case, since a
// push of "Latest" moves as readily: the cost of a false warning is one condition.
func FloatingTag(tag string) bool {
	if tag == "" {
		return true
	}
	return slices.Contains(floatingTags, strings.ToLower(tag))
}

// ResolveIntOrPercent turns a count or a percent of base into a count: a percent is rounded up
// or down as asked, a count is taken as it is. A negative value, or a string that is not a
// percent, is an error (the CRD refuses both; the caller falls back to the default).
func ResolveIntOrPercent(v intstr.IntOrString, base int, roundUp bool) (int, error) {
	if v.Type == intstr.String && !strings.HasSuffix(v.StrVal, "%") {
		return 0, fmt.Errorf("%q is neither a count nor a percent", v.StrVal)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, base, roundUp)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("%s is negative", v.String())
	}
	return n, nil
}

// RolloutInput is what the pool observed of a rollout in a pool with standby Running, where
// updating a free slot replaces its ready container. Every slot counts in at most one of
// ReadyFree, InFlight and Warming.
type RolloutInput struct {
	MinIdle, MaxSlots int
	Strategy          v1.UpdateStrategy
	// Total is the pool's slots now. BaseSlots is its slots when the rollout began
	// (status.rollout.baseSlots), Needed what it would hold now without the rollout (for
	// waiting and busy bots and minIdle; 0 when unknown): slots above the larger of the two
	// count as surge already made, and are the ones removed when the rollout ends.
	Total, BaseSlots, Needed int
	// ReadyFree counts the free slots a bot can start on now and that stay so: Ready, and not
	// admitted for an update.
	ReadyFree int
	// Outdated counts those of ReadyFree that are not on the target template yet.
	Outdated int
	// InFlight counts the slots admitted for an update (annotated botpool.dev/update with the
	// target) that are not Ready on it yet.
	InFlight int
	// Warming counts the free slots already on the target that are not Ready yet and were not
	// admitted (new slots, surge among them): they add to ReadyFree soon.
	Warming int
}

// RolloutStep is what a rollout may do in this pass.
type RolloutStep struct {
	// Floor is how few ready free slots the rollout may leave: minIdle - maxUnavailable
	// (maxUnavailable a count, or a percent of minIdle rounded down), never below 0.
	Floor int
	// MaxSurge is spec.updateStrategy.maxSurge as a count (a percent of minIdle rounded up):
	// how many slots above the pool's size the rollout may make.
	MaxSurge int
	// Admit is how many more outdated free slots may be admitted for an update now.
	Admit int
	// Surge is how many extra slots (on the target template) supply may create now, within
	// maxSlots.
	Surge int
	// NoRoom is set when the rollout can only go on below the floor, one slot at a time:
	// nothing may be admitted within the floor, no surge can help (maxSlots reached, or
	// maxSurge 0 or used up), and the slots warming or in flight will not lift readyFree above
	// the floor either. Admit is then 1 while no slot is in flight, else 0. Without it an idle
	// pool at maxSlots would never finish its rollout.
	NoRoom bool
}

// RolloutBudget applies spec.updateStrategy to a standby Running pool's rollout: admit as many
// outdated ready slots as keep the floor (readyFree - floor, the slots in flight already out
// of readyFree); when that admits nothing, surge up to maxSurge above the pool's size, within
// maxSlots; when neither is possible and nothing is warming, one slot at a time below the
// floor. Values the CRD would refuse fall back to the defaults.
func RolloutBudget(in RolloutInput) RolloutStep {
	minIdle := max(in.MinIdle, 0)
	maxUnavailable, err := ResolveIntOrPercent(in.Strategy.MaxUnavailableOrDefault(), minIdle, false)
	if err != nil {
		maxUnavailable, _ = ResolveIntOrPercent(intstr.FromInt32(v1.DefaultMaxUnavailable), minIdle, false)
	}
	maxSurge, err := ResolveIntOrPercent(in.Strategy.MaxSurgeOrDefault(), minIdle, true)
	if err != nil {
		maxSurge, _ = ResolveIntOrPercent(intstr.FromString(v1.DefaultMaxSurge), minIdle, true)
	}
	b := RolloutStep{Floor: max(minIdle-maxUnavailable, 0), MaxSurge: maxSurge}
	outdated := max(in.Outdated, 0)
	if outdated == 0 {
		return b
	}
	b.Admit = min(max(in.ReadyFree-b.Floor, 0), outdated)
	if b.Admit > 0 {
		return b
	}
	surged := max(in.Total-max(in.BaseSlots, in.Needed), 0)
	b.Surge = min(max(min(maxSurge-surged, in.MaxSlots-in.Total), 0), outdated)
	if b.Surge > 0 || in.ReadyFree+in.InFlight+in.Warming > b.Floor {
		// Surge, or slots on their way to Ready lift readyFree above the floor: wait for them.
		return b
	}
	b.NoRoom = true
	if in.InFlight <= 0 {
		b.Admit = 1
	}
	return b
}

// Outdated reports whether the slot is on another template than the pool's status names and
// its server holds the image of the pool's: an update can start warm now. It reads only what
// the cache holds; syncTemplate checks again on the template read now.
func Outdated(slot *v1.BotPoolSlot, pool *v1.BotPool) bool {
	return pool.Status.TemplateHash != "" && slot.Status.TemplateHash != pool.Status.TemplateHash &&
		CachedOn(pool, SlotServer(slot, pool), pool.Status.TemplateImage, RestartedAt(pool))
}
