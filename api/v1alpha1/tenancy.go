package v1alpha1

import "k8s.io/apimachinery/pkg/types"

// PoolKey is the pool the bot's status names, in the bot's namespace unless
// status.poolNamespace says another; an empty Name when it names none.
func (b *Bot) PoolKey() types.NamespacedName {
	ns := b.Status.PoolNamespace
	if ns == "" {
		ns = b.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: b.Status.Pool}
}

// SetPool records the bot's pool in its status: the name, and the namespace when it is not
// the bot's own.
func (b *Bot) SetPool(pool *BotPool) {
	b.Status.Pool, b.Status.PoolNamespace = pool.Name, ""
	if pool.Namespace != b.Namespace {
		b.Status.PoolNamespace = pool.Namespace
	}
}

// ClearPool forgets the bot's pool: it is routed again.
func (b *Bot) ClearPool() { b.Status.Pool, b.Status.PoolNamespace = "", "" }

// ForeignTo reports whether the bot lives in another namespace than the pool (or slot) whose
// namespace is given: what the bot's status, Events and webhooks may say of that pool is then
// limited to what its own namespace may read (see docs/tenancy.md).
func (b *Bot) ForeignTo(namespace string) bool { return b.Namespace != namespace }

// BotKey is the bot the slot is bound to, in the slot's namespace unless its botRef names
// another; an empty Name when the slot is free.
func (s *BotPoolSlot) BotKey() types.NamespacedName {
	ref := s.Spec.BotRef
	if ref == nil {
		return types.NamespacedName{}
	}
	ns := ref.Namespace
	if ns == "" {
		ns = s.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: ref.Name}
}

// ReferenceTo is the botRef a slot of slotNamespace holds for the bot: its namespace only when
// it is not the slot's, so a pool serving its own namespace writes what it always did.
func ReferenceTo(bot *Bot, slotNamespace string) *BotReference {
	ref := &BotReference{Name: bot.Name, UID: bot.UID}
	if bot.Namespace != slotNamespace {
		ref.Namespace = bot.Namespace
	}
	return ref
}

// AllowedFrom is the pool's spec.allowedNamespaces.from, Same when unset.
func (p *BotPool) AllowedFrom() NamespacesFrom {
	if a := p.Spec.AllowedNamespaces; a != nil && a.From != "" {
		return a.From
	}
	return NamespacesSame
}
