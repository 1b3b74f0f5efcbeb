package modelcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Kinds the model stores.
const (
	kindBot       = "Bot"
	kindSlot      = "BotPoolSlot"
	kindPool      = "BotPool"
	kindSecret    = "Secret"
	kindNamespace = "Namespace"
)

// objKey names one object of the API server.
type objKey struct {
	kind string
	types.NamespacedName
}

func (k objKey) String() string { return k.kind + "/" + k.Name }

// write is one successful write to the API server, with the object before and after (nil
// when it did not exist).
type write struct {
	op       string // create, update, patch, status, delete
	key      objKey
	old, new client.Object
}

// apiServer is the API server of the model: controller-runtime's fake client plus what the
// real server does that the reconcilers rely on — a uid and a creationTimestamp for new
// objects, and the CEL rules of BotPoolSlot.spec (botRef only goes from empty to a bot or
// back; pool is immutable). Writes are serialized, reported to onWrite with the object
// before and after, and mark the object dirty for the cache.
type apiServer struct {
	client.WithWatch
	scheme *runtime.Scheme
	clk    clock.PassiveClock

	mu    sync.Mutex
	uids  int
	dirty map[objKey]bool
	// truth mirrors what the fake client stores, updated on every write: the checks read it
	// without the fake client's JSON round trips. Its objects are never mutated.
	truth   *objectSet
	refused []string // writes the CEL rules refused, for the report
	onWrite func(write)
}

func (a *apiServer) kindOf(o runtime.Object) string {
	gvk, err := apiutil.GVKForObject(o, a.scheme)
	if err != nil {
		panic(err)
	}
	return gvk.Kind
}

func (a *apiServer) keyOf(o client.Object) objKey {
	return objKey{kind: a.kindOf(o), NamespacedName: client.ObjectKeyFromObject(o)}
}

func newObject(kind string) client.Object {
	switch kind {
	case kindBot:
		return &v1.Bot{}
	case kindSlot:
		return &v1.BotPoolSlot{}
	case kindPool:
		return &v1.BotPool{}
	case kindSecret:
		return &corev1.Secret{}
	case kindNamespace:
		return &corev1.Namespace{}
	}
	panic("unknown kind " + kind)
}

// live returns the stored object (shared: never mutate it), nil when there is none.
func (a *apiServer) live(k objKey) client.Object {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.truth.get(k)
}

// liveOf lists the stored objects of a kind, sorted by name (shared: never mutate them).
func (a *apiServer) liveOf(kind string) []client.Object {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.truth.list(kind)
}

// get reads the stored object from the fake client, nil when there is none.
func (a *apiServer) get(k objKey) client.Object {
	o := newObject(k.kind)
	if err := a.Get(context.Background(), k.NamespacedName, o); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		panic(err)
	}
	return o
}

// wrote reports a successful write; callers hold a.mu.
func (a *apiServer) wrote(op string, k objKey, old client.Object) {
	a.dirty[k] = true
	n := a.get(k)
	if n == nil {
		a.truth.remove(k)
	} else {
		a.truth.put(k, n)
	}
	if a.onWrite != nil {
		a.onWrite(write{op: op, key: k, old: old, new: n})
	}
}

// takeDirty returns the objects written since the last call, sorted (deterministic replays).
func (a *apiServer) takeDirty() []objKey {
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := make([]objKey, 0, len(a.dirty))
	for k := range a.dirty {
		keys = append(keys, k)
	}
	sortKeys(keys)
	return keys
}

func (a *apiServer) clean(k objKey) {
	a.mu.Lock()
	delete(a.dirty, k)
	a.mu.Unlock()
}

func sortKeys(keys []objKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].kind != keys[j].kind {
			return keys[i].kind < keys[j].kind
		}
		return keys[i].Name < keys[j].Name
	})
}

// Create implements client.Writer.
func (a *apiServer) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	uid, created := obj.GetUID(), obj.GetCreationTimestamp()
	if uid == "" {
		a.uids++
		obj.SetUID(types.UID(fmt.Sprintf("uid-%06d", a.uids)))
	}
	obj.SetCreationTimestamp(metav1.NewTime(a.clk.Now()))
	if err := a.WithWatch.Create(ctx, obj, opts...); err != nil {
		obj.SetUID(uid)
		obj.SetCreationTimestamp(created)
		return err
	}
	a.wrote("create", a.keyOf(obj), nil)
	return nil
}

// Update implements client.Writer.
func (a *apiServer) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.keyOf(obj)
	old := a.truth.get(k)
	if err := a.admit(k, old, obj); err != nil {
		return err
	}
	if err := a.WithWatch.Update(ctx, obj, opts...); err != nil {
		return err
	}
	a.wrote("update", k, old)
	return nil
}

// Patch implements client.Writer.
func (a *apiServer) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.keyOf(obj)
	old := a.truth.get(k)
	if old != nil && k.kind == kindSlot {
		patched, err := applyMergePatch(old, patch, obj)
		if err != nil {
			return err
		}
		if patched != nil {
			if err := a.admit(k, old, patched); err != nil {
				return err
			}
		}
	}
	if err := a.WithWatch.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	a.wrote("patch", k, old)
	return nil
}

// Delete implements client.Writer.
func (a *apiServer) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.keyOf(obj)
	old := a.truth.get(k)
	if err := a.WithWatch.Delete(ctx, obj, opts...); err != nil {
		return err
	}
	a.wrote("delete", k, old)
	return nil
}

// Status implements client.StatusClient.
func (a *apiServer) Status() client.SubResourceWriter { return statusWriter{a} }

type statusWriter struct{ a *apiServer }

func (s statusWriter) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return fmt.Errorf("status create is not used by the controllers")
}

func (s statusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	k := s.a.keyOf(obj)
	old := s.a.truth.get(k)
	if err := s.a.WithWatch.Status().Update(ctx, obj, opts...); err != nil {
		return err
	}
	s.a.wrote("status", k, old)
	return nil
}

func (s statusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	k := s.a.keyOf(obj)
	old := s.a.truth.get(k)
	if err := s.a.WithWatch.Status().Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	s.a.wrote("status", k, old)
	return nil
}

func (s statusWriter) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	return fmt.Errorf("status apply is not used by the controllers")
}

// admit applies the CEL rules of the CRDs that the fake client does not know. Only the
// BotPoolSlot rules matter to binding: a write whose resourceVersion is stale is left to the
// fake client, which refuses it with a conflict as the real server would.
func (a *apiServer) admit(k objKey, old, updated client.Object) error {
	if k.kind != kindSlot || old == nil {
		return nil
	}
	if rv := updated.GetResourceVersion(); rv != "" && rv != old.GetResourceVersion() {
		return nil
	}
	o, n := old.(*v1.BotPoolSlot), updated.(*v1.BotPoolSlot)
	var msg string
	switch {
	case o.Spec.Pool != n.Spec.Pool:
		msg = "pool is immutable"
	case o.Spec.BotRef != nil && n.Spec.BotRef != nil && *o.Spec.BotRef != *n.Spec.BotRef:
		msg = "botRef can only be set on a free slot; clear it before binding another bot"
	default:
		return nil
	}
	a.refused = append(a.refused, fmt.Sprintf("%s at %s: %s", k, a.clk.Now().Format(time.RFC3339), msg))
	return apierrors.NewInvalid(schema.GroupKind{Group: v1.GroupVersion.Group, Kind: kindSlot}, k.Name,
		field.ErrorList{field.Invalid(field.NewPath("spec"), "", msg)})
}

// applyMergePatch computes what a JSON merge patch makes of old (RFC 7386), nil for other
// patch types.
func applyMergePatch(old client.Object, patch client.Patch, obj client.Object) (client.Object, error) {
	if patch.Type() != types.MergePatchType {
		return nil, nil
	}
	data, err := patch.Data(obj)
	if err != nil {
		return nil, err
	}
	base, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	var target, p any
	if err := json.Unmarshal(base, &target); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	merged, err := json.Marshal(mergePatch(target, p))
	if err != nil {
		return nil, err
	}
	out := reflect.New(reflect.TypeOf(old).Elem()).Interface().(client.Object)
	if err := json.Unmarshal(merged, out); err != nil {
		return nil, err
	}
	return out, nil
}

func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}

// objectSet holds objects by kind and key, and lists a kind in key order without sorting on
// every call (the checks list after every step). Callers lock.
type objectSet struct {
	byKind map[string]map[types.NamespacedName]client.Object
	sorted map[string][]types.NamespacedName // a kind's keys in order; absent when stale
}

func newObjectSet() *objectSet {
	return &objectSet{byKind: map[string]map[types.NamespacedName]client.Object{}, sorted: map[string][]types.NamespacedName{}}
}

func (s *objectSet) get(k objKey) client.Object { return s.byKind[k.kind][k.NamespacedName] }

func (s *objectSet) put(k objKey, o client.Object) {
	m := s.byKind[k.kind]
	if m == nil {
		m = map[types.NamespacedName]client.Object{}
		s.byKind[k.kind] = m
	}
	if _, had := m[k.NamespacedName]; !had {
		delete(s.sorted, k.kind)
	}
	m[k.NamespacedName] = o
}

func (s *objectSet) remove(k objKey) {
	if _, had := s.byKind[k.kind][k.NamespacedName]; had {
		delete(s.byKind[k.kind], k.NamespacedName)
		delete(s.sorted, k.kind)
	}
}

// list returns a kind's objects in key order.
func (s *objectSet) list(kind string) []client.Object {
	keys, ok := s.sorted[kind]
	if !ok {
		for k := range s.byKind[kind] {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].Namespace != keys[j].Namespace {
				return keys[i].Namespace < keys[j].Namespace
			}
			return keys[i].Name < keys[j].Name
		})
		s.sorted[kind] = keys
	}
	out := make([]client.Object, len(keys))
	for i, k := range keys {
		out[i] = s.byKind[kind][k]
	}
	return out
}
