package coolifyview

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// Keys of a pool's credentials Secret.
const (
	credentialsURLKey   = "url"
	credentialsTokenKey = "token"
)

// Credential problems a person has to fix; the pool reports them as Stalled.
var (
	ErrCredentialsNotFound = errors.New("credentials Secret not found")
	ErrCredentialsInvalid  = errors.New("credentials Secret incomplete")
	// ErrCredentialsNotAllowed: the Secret lacks the opt-in label (see AllowedForPools).
	ErrCredentialsNotAllowed = errors.New("credentials Secret not allowed")
)

// Connector gives a controller the Coolify API of a pool.
type Connector interface {
	// ForPool returns the client of the pool's Coolify instance, built from its credentials
	// Secret. Errors wrap ErrCredentialsNotFound or ErrCredentialsInvalid when the Secret is
	// missing or lacks a key.
	ForPool(ctx context.Context, pool *v1.BotPool) (CoolifyAPI, error)
	// LastKnown returns the last client ForPool handed out for the pool (by namespace and
	// name), or nil. Cleanup uses it when the credentials or the pool are already gone — as
	// when a whole namespace is deleted and its Secrets go first — so applications are still
	// deleted instead of leaking or holding finalizers forever.
	LastKnown(pool types.NamespacedName) CoolifyAPI
}

// SecretConnector reads credentials Secrets and hands out clients from a Registry, so every
// pool of one Coolify user shares one rate limiter.
type SecretConnector struct {
	// Reader reads the Secrets past the cache: the manager caches no Secrets.
	Reader   client.Reader
	Registry *coolify.Registry
	Clock    clock.PassiveClock
	// RefreshAfter bounds how stale a cached client may be: a rotated token is picked up
	// within this time without reading the Secret on every reconcile.
	RefreshAfter time.Duration

	mu      sync.Mutex
	Clients map[types.NamespacedName]CachedClient // by pool
}

type CachedClient struct {
	secret  types.NamespacedName
	api     CoolifyAPI
	fetched time.Time
}

// ForPool implements Connector.
func (c *SecretConnector) ForPool(ctx context.Context, pool *v1.BotPool) (CoolifyAPI, error) {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Spec.Coolify.CredentialsSecretRef.Name}
	poolKey := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	now := c.Clock.Now()
	c.mu.Lock()
	cached, ok := c.Clients[poolKey]
	c.mu.Unlock()
	if ok && cached.secret == key && now.Sub(cached.fetched) < c.RefreshAfter {
		return cached.api, nil
	}

	var secret corev1.Secret
	if err := c.Reader.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrCredentialsNotFound, key.Name)
		}
		return nil, fmt.Errorf("reading credentials Secret %s: %w", key.Name, err)
	}
	if err := policy.AllowedForPools(&secret); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCredentialsNotAllowed, err)
	}
	url, token := string(secret.Data[credentialsURLKey]), string(secret.Data[credentialsTokenKey])
	if url == "" || token == "" {
		return nil, fmt.Errorf("%w: Secret %s needs the keys %q and %q", ErrCredentialsInvalid, key.Name, credentialsURLKey, credentialsTokenKey)
	}
	api, err := c.Registry.Client(url, token)
	if err != nil {
		return nil, fmt.Errorf("%w: Secret %s: %w", ErrCredentialsInvalid, key.Name, err)
	}
	c.mu.Lock()
	if c.Clients == nil {
		c.Clients = map[types.NamespacedName]CachedClient{}
	}
	c.Clients[poolKey] = CachedClient{secret: key, api: api, fetched: now}
	c.mu.Unlock()
	return api, nil
}

// LastKnown implements Connector.
func (c *SecretConnector) LastKnown(pool types.NamespacedName) CoolifyAPI {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cached, ok := c.Clients[pool]; ok {
		return cached.api
	}
	return nil
}

// Forget drops the cached client of a pool that is gone (called once its slots and
// applications are deleted), so the cache does not grow with every pool ever seen.
func (c *SecretConnector) Forget(pool types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.Clients, pool)
}
