package modelcheck

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// informerCache is the manager's cache as the reconcilers see it: every object at a version
// the API server had, never older than a version it showed before, but possibly behind the
// newest — per object, as informers deliver events. Like the manager's, it holds no Secrets.
// Its indexes are the controllers' and the bot API's own
// (registered through client.FieldIndexer).
type informerCache struct {
	api *apiServer

	mu      sync.RWMutex
	objs    *objectSet
	indexes map[string]map[string]client.IndexerFunc // kind → field → extractor
}

func newInformerCache(api *apiServer) *informerCache {
	return &informerCache{api: api, objs: newObjectSet(), indexes: map[string]map[string]client.IndexerFunc{}}
}

// IndexField implements client.FieldIndexer.
func (c *informerCache) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	kind := c.api.kindOf(obj)
	if c.indexes[kind] == nil {
		c.indexes[kind] = map[string]client.IndexerFunc{}
	}
	if _, dup := c.indexes[kind][field]; dup {
		return fmt.Errorf("index %s of %s registered twice", field, kind)
	}
	c.indexes[kind][field] = fn
	return nil
}

// resetIndexes forgets the registered indexes, as a restarted manager starts with a cache that
// has none.
func (c *informerCache) resetIndexes() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.indexes = map[string]map[string]client.IndexerFunc{}
}

func cached(k objKey, _ client.Object) bool {
	return k.kind != kindSecret
}

// sync brings one object to the API server's current version (or drops it).
func (c *informerCache) sync(k objKey) {
	o := c.api.live(k)
	c.mu.Lock()
	if o == nil || !cached(k, o) {
		c.objs.remove(k)
	} else {
		c.objs.put(k, o.DeepCopyObject().(client.Object))
	}
	c.mu.Unlock()
	c.api.clean(k)
}

// syncAll brings every written object up to date.
func (c *informerCache) syncAll() {
	for _, k := range c.api.takeDirty() {
		c.sync(k)
	}
}

// synced reports whether the cache shows the API server's current version of k.
func (c *informerCache) synced(k objKey) bool {
	c.api.mu.Lock()
	dirty := c.api.dirty[k]
	c.api.mu.Unlock()
	return !dirty
}

// Get implements client.Reader.
func (c *informerCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	k := objKey{kind: c.api.kindOf(obj), NamespacedName: key}
	c.mu.RLock()
	o := c.objs.get(k)
	c.mu.RUnlock()
	if o == nil {
		return apierrors.NewNotFound(resourceOf(k.kind), key.Name)
	}
	copyInto(obj, o)
	return nil
}

// List implements client.Reader: namespace, labels, and exact-match field selectors on the
// registered indexes, as the manager's cache answers them.
func (c *informerCache) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	kind := strings.TrimSuffix(c.api.kindOf(list), "List")
	var reqs [][2]string
	if lo.FieldSelector != nil {
		for _, r := range lo.FieldSelector.Requirements() {
			if c.indexes[kind][r.Field] == nil {
				return fmt.Errorf("field selector %s on %s without an index", r.Field, kind)
			}
			reqs = append(reqs, [2]string{r.Field, r.Value})
		}
	}
	c.mu.Lock() // list may sort the kind's keys once
	all := c.objs.list(kind)
	items := make([]runtime.Object, 0, len(all))
	for _, o := range all {
		if lo.Namespace != "" && o.GetNamespace() != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		if !matchesIndexes(c.indexes[kind], reqs, o) {
			continue
		}
		items = append(items, o.DeepCopyObject())
	}
	c.mu.Unlock()
	return meta.SetList(list, items)
}

func matchesIndexes(idx map[string]client.IndexerFunc, reqs [][2]string, o client.Object) bool {
	for _, r := range reqs {
		found := false
		for _, v := range idx[r[0]](o) {
			if v == r[1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func copyInto(dst, src client.Object) {
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src.DeepCopyObject()).Elem())
}

func resourceOf(kind string) schema.GroupResource {
	switch kind {
	case kindSecret:
		return corev1.Resource("secrets")
	case kindNamespace:
		return corev1.Resource("namespaces")
	case kindBot:
		return v1.GroupVersion.WithResource("bots").GroupResource()
	case kindSlot:
		return v1.GroupVersion.WithResource("botpoolslots").GroupResource()
	}
	return v1.GroupVersion.WithResource("botpools").GroupResource()
}

// cachedClient is the manager's client as a reconciler has it: reads from the cache, writes
// to the API server.
type cachedClient struct {
	*apiServer
	cache *informerCache
}

// Get implements client.Reader.
func (c cachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.cache.Get(ctx, key, obj, opts...)
}

// List implements client.Reader.
func (c cachedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.cache.List(ctx, list, opts...)
}
