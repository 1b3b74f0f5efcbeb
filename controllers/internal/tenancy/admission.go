package tenancy

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
)

// Admission decides whether pools admit namespaces, reading the namespaces' labels from the
// manager's cache (a Namespace informer, started on the first pool that selects by labels).
type Admission struct {
	Reader client.Reader
}

// Admits reports whether the pool serves Bots of namespace ns. A namespace that is gone is
// admitted by no pool but its own namespace's (its bots are going too); a selector that does
// not parse admits no other namespace (policy.Admits), and the refusal is not an error of the
// pass: the bot says PoolNotAllowed until the pool is mended.
func (a Admission) Admits(ctx context.Context, pool *v1.BotPool, ns string) (bool, error) {
	if ns == pool.Namespace || pool.AllowedFrom() == v1.NamespacesAll {
		return true, nil
	}
	if pool.AllowedFrom() != v1.NamespacesSelector {
		return false, nil
	}
	var namespace corev1.Namespace
	if err := a.Reader.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	ok, err := policy.Admits(pool, ns, namespace.Labels)
	return ok && err == nil, nil
}
