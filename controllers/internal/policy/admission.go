package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Admits reports whether the pool serves Bots of namespace ns, whose labels are given (read
// only with from: Selector): its own namespace always, others as its spec.allowedNamespaces
// says. A selector that does not parse admits no other namespace, and the error says why.
func Admits(pool *v1.BotPool, ns string, nsLabels map[string]string) (bool, error) {
	if ns == pool.Namespace {
		return true, nil
	}
	switch pool.AllowedFrom() {
	case v1.NamespacesAll:
		return true, nil
	case v1.NamespacesSelector:
		sel, err := metav1.LabelSelectorAsSelector(pool.Spec.AllowedNamespaces.Selector)
		if err != nil {
			return false, fmt.Errorf("pool %s/%s: spec.allowedNamespaces.selector: %w", pool.Namespace, pool.Name, err)
		}
		return sel.Matches(labels.Set(nsLabels)), nil
	}
	return false, nil
}

// Shared reports whether the pool may admit namespaces other than its own.
func Shared(pool *v1.BotPool) bool { return pool.AllowedFrom() != v1.NamespacesSame }

// NotAllowedMessage is what a bot of namespace ns, for platform, says when the pool it names
// in another namespace does not serve it: the same words whether that pool does not exist, is
// of another platform or does not admit the namespace, so that naming pools is no way to learn
// which pools other namespaces hold; in words a tenant can act on (ask the pool's owners).
func NotAllowedMessage(pool types.NamespacedName, ns string, platform v1.Platform) string {
	return fmt.Sprintf("BotPool %s/%s does not admit %s Bots of namespace %s (no such pool, another platform, or not in its spec.allowedNamespaces): ask its owners to admit the namespace, or name another pool in spec.poolRef",
		pool.Namespace, pool.Name, platform, ns)
}

// SlotMessage is what a bot may repeat of its slot's message (a failed start, a slot lost):
// the message itself for a bot of the slot's namespace; for a bot of another namespace only
// the slot's reason, as the message may quote the pool's Coolify (its URLs, servers and
// deployment logs), which is not the bot's namespace's to read.
func SlotMessage(bot *v1.Bot, slot *v1.BotPoolSlot) string {
	if !bot.ForeignTo(slot.Namespace) {
		return slot.Status.Message
	}
	return fmt.Sprintf("The slot of shared pool %s/%s failed (%s); its details are in the pool's namespace", slot.Namespace, slot.Spec.Pool, slot.Status.Reason)
}

// AttemptServer is how a bot's status.startAttempts names the server of a slot it failed in:
// the server's UUID for a bot of the slot's namespace; for a bot of another namespace a digest
// of it ("h-" and 12 hex digits), which the next start can still avoid but which names nothing
// of the pool's Coolify.
func AttemptServer(bot *v1.Bot, slot *v1.BotPoolSlot, pool *v1.BotPool) string {
	server := SlotServer(slot, pool)
	if server == "" || !bot.ForeignTo(slot.Namespace) {
		return server
	}
	sum := sha256.Sum256([]byte(slot.Namespace + "/" + server))
	return "h-" + hex.EncodeToString(sum[:6])
}
