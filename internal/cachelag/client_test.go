package cachelag

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

const podUID = "pod-uid"

// newPod is a pod as the fake API server stores it; finalizers keep it after a delete.
func newPod(finalizers ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: podUID, Finalizers: finalizers}}
}

// writeKinds are the writes NewClient records, each changing the pod it is given.
var writeKinds = []struct {
	name  string
	write func(ctx context.Context, c client.Client, pod *corev1.Pod) error
}{
	{"Update", func(ctx context.Context, c client.Client, pod *corev1.Pod) error {
		pod.Labels = map[string]string{"written": "yes"}
		return c.Update(ctx, pod)
	}},
	{"Patch", func(ctx context.Context, c client.Client, pod *corev1.Pod) error {
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Labels = map[string]string{"written": "yes"}
		return c.Patch(ctx, pod, patch)
	}},
	{"Status().Update", func(ctx context.Context, c client.Client, pod *corev1.Pod) error {
		pod.Status.Message = "written"
		return c.Status().Update(ctx, pod)
	}},
	{"Status().Patch", func(ctx context.Context, c client.Client, pod *corev1.Pod) error {
		patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
		pod.Status.Message = "written"
		return c.Status().Patch(ctx, pod, patch)
	}},
	{"SubResource(status).Update", func(ctx context.Context, c client.Client, pod *corev1.Pod) error {
		pod.Status.Message = "written"
		return c.SubResource("status").Update(ctx, pod)
	}},
	{"SubResource(status).Patch", func(ctx context.Context, c client.Client, pod *corev1.Pod) error {
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Status.Message = "written"
		return c.SubResource("status").Patch(ctx, pod, patch)
	}},
	{"Delete (finalizers: marked deleted)", func(ctx context.Context, c client.Client, pod *corev1.Pod) error {
		return c.Delete(ctx, pod)
	}},
}

func TestClientRecordsEveryWriteKind(t *testing.T) {
	ctx := context.Background()
	for _, k := range writeKinds {
		t.Run(k.name, func(t *testing.T) {
			base := fake.NewClientBuilder().WithObjects(newPod("keep")).WithStatusSubresource(&corev1.Pod{}).Build()
			var tr Tracker
			c := NewClient(base, &tr)
			pod := &corev1.Pod{}
			must(t, base.Get(ctx, client.ObjectKeyFromObject(newPod()), pod))
			old := pod.ResourceVersion

			must(t, k.write(ctx, c, pod))
			if !tr.Stale(podUID, old) {
				t.Fatalf("version %s, which the write replaced, is not stale", old)
			}
			if !tr.Stale(podUID, old) {
				t.Fatal("one stale read forgot the write")
			}
			current := &corev1.Pod{}
			must(t, base.Get(ctx, client.ObjectKeyFromObject(pod), current))
			if current.ResourceVersion == old {
				t.Fatalf("the write left version %s: nothing to test", old)
			}
			if tr.Stale(podUID, current.ResourceVersion) {
				t.Fatalf("version %s, which the write made, is stale", current.ResourceVersion)
			}
			if tr.Stale(podUID, old) {
				t.Error("once a newer version was read, the replaced one is still stale")
			}
		})
	}
}

func TestClientRecordsNothingForAFailedWrite(t *testing.T) {
	ctx := context.Background()
	refused := errors.New("refused")
	base := fake.NewClientBuilder().WithObjects(newPod("keep")).WithStatusSubresource(&corev1.Pod{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return refused },
			Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
				return refused
			},
			Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return refused },
			SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
				return refused
			},
			SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
				return refused
			},
		}).Build()
	for _, k := range writeKinds {
		var tr Tracker
		c := NewClient(base, &tr)
		pod := &corev1.Pod{}
		must(t, base.Get(ctx, client.ObjectKeyFromObject(newPod()), pod))
		old := pod.ResourceVersion
		if err := k.write(ctx, c, pod); !errors.Is(err, refused) {
			t.Fatalf("%s: got %v, want the injected error", k.name, err)
		}
		if tr.Stale(podUID, old) {
			t.Errorf("%s failed, yet version %s is stale", k.name, old)
		}
	}

	// A conflict, as the API server answers a write built on a past version.
	base = fake.NewClientBuilder().WithObjects(newPod()).Build()
	var tr Tracker
	c := NewClient(base, &tr)
	pod := &corev1.Pod{}
	must(t, base.Get(ctx, client.ObjectKeyFromObject(newPod()), pod))
	past := pod.DeepCopy()
	must(t, base.Update(ctx, pod)) // someone else's write
	past.Labels = map[string]string{"written": "yes"}
	if err := c.Update(ctx, past); !apierrors.IsConflict(err) {
		t.Fatalf("an update on a past version: got %v, want a conflict", err)
	}
	if tr.Stale(podUID, past.ResourceVersion) {
		t.Error("a refused update recorded the version it did not replace")
	}
}

// TestClientForgetsObjectsThatAreGone: no read will ever show a newer version of an object
// that is gone, so what a write recorded of it is dropped rather than kept for ever.
func TestClientForgetsObjectsThatAreGone(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKeyFromObject(newPod())
	// written sets up base with a pod (finalizers as given) whose first version a write
	// through c replaced, and returns that version.
	written := func(t *testing.T, finalizers ...string) (base client.Client, c client.Client, tr *Tracker, old string) {
		t.Helper()
		base = fake.NewClientBuilder().WithObjects(newPod(finalizers...)).Build()
		tr = &Tracker{}
		c = NewClient(base, tr)
		pod := &corev1.Pod{}
		must(t, base.Get(ctx, key, pod))
		old = pod.ResourceVersion
		pod.Labels = map[string]string{"written": "yes"}
		must(t, c.Update(ctx, pod))
		if !tr.Stale(podUID, old) {
			t.Fatal("the update was not recorded")
		}
		return base, c, tr, old
	}

	t.Run("deleted without finalizers", func(t *testing.T) {
		base, c, tr, old := written(t)
		pod := &corev1.Pod{}
		must(t, base.Get(ctx, key, pod))
		must(t, c.Delete(ctx, pod))
		if tr.Stale(podUID, old) {
			t.Error("a deleted pod is still remembered")
		}
	})

	t.Run("last finalizer removed", func(t *testing.T) {
		base, c, tr, old := written(t, "keep")
		pod := &corev1.Pod{}
		must(t, base.Get(ctx, key, pod))
		must(t, c.Delete(ctx, pod))
		if !tr.Stale(podUID, old) || !tr.Stale(podUID, pod.ResourceVersion) {
			t.Fatal("marking the pod deleted forgot what was recorded, or was not recorded")
		}
		must(t, base.Get(ctx, key, pod))
		pod.Finalizers = nil
		must(t, c.Update(ctx, pod))
		if err := base.Get(ctx, key, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the pod without finalizers: got %v, want it gone", err)
		}
		if tr.Stale(podUID, old) {
			t.Error("a pod whose last finalizer went is still remembered")
		}
	})

	t.Run("a write answers NotFound", func(t *testing.T) {
		base, c, tr, old := written(t)
		pod := &corev1.Pod{}
		must(t, base.Get(ctx, key, pod))
		must(t, base.Delete(ctx, pod)) // by someone else
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Labels = map[string]string{"written": "again"}
		if err := c.Patch(ctx, pod, patch); !apierrors.IsNotFound(err) {
			t.Fatalf("a patch of a deleted pod: got %v, want NotFound", err)
		}
		if tr.Stale(podUID, old) {
			t.Error("a pod whose write answered NotFound is still remembered")
		}
	})
}

// TestClientSharesOneTracker: what one writer records, a reader using the Tracker sees,
// whichever client wrote.
func TestClientSharesOneTracker(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().WithObjects(newPod()).Build()
	var tr Tracker
	first, second := NewClient(base, &tr), NewClient(base, &tr)
	pod := &corev1.Pod{}
	must(t, base.Get(ctx, client.ObjectKeyFromObject(newPod()), pod))
	v1 := pod.ResourceVersion
	pod.Labels = map[string]string{"by": "first"}
	must(t, first.Update(ctx, pod))
	v2 := pod.ResourceVersion
	pod.Labels = map[string]string{"by": "second"}
	must(t, second.Update(ctx, pod))
	if !tr.Stale(podUID, v1) || !tr.Stale(podUID, v2) {
		t.Errorf("versions %s and %s, replaced by two writers, are not both stale", v1, v2)
	}
}

// TestClientPassesOtherCallsThrough: reads and creates are the wrapped client's; a create
// replaces no version.
func TestClientPassesOtherCallsThrough(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().Build()
	var tr Tracker
	c := NewClient(base, &tr)
	pod := newPod()
	must(t, c.Create(ctx, pod))
	got := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(pod), got))
	if got.UID != podUID {
		t.Fatalf("read back %+v", got.ObjectMeta)
	}
	if tr.Stale(podUID, got.ResourceVersion) {
		t.Error("a create recorded a version")
	}
	if _, err := c.GroupVersionKindFor(pod); err != nil {
		t.Error(err)
	}
	if c.Scheme() != base.Scheme() {
		t.Error("the scheme is not the wrapped client's")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
