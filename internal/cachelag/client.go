package cachelag

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewClient returns c with its writes recorded in t, so that no write of a component that
// writes through it goes unrecorded for want of a hand call.
//
// A successful update or patch, of an object or of one of its subresources (its status), records
// the version it replaced: the object's resourceVersion before the call. That is the latest
// version the caller knew, not necessarily the one a patch was computed from: a status patch
// at the end of a pass that updated the object earlier replaces the update's version, and
// recording the older copy's would leave that one unmarked, so a pass reading it from a
// lagging cache would act on it (see TestReleaseWaitsForTheCacheAfterItsOwnStatusWrite).
//
// A deletion of an object that has finalizers only marks it deleted, a new version: the one
// it replaced is recorded. An object that is gone for good (deleted without finalizers, its
// last finalizer removed while deleted, or answering a write with NotFound) is forgotten: no
// read will ever show a newer version and clear it.
//
// A write that fails records nothing. Creates replace no version, and server-side applies
// and DeleteAllOf name none: they pass through unrecorded.
func NewClient(c client.Client, t *Tracker) client.Client {
	return &recordingClient{Client: c, t: t}
}

type recordingClient struct {
	client.Client
	t *Tracker
}

func (c *recordingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	uid, old := obj.GetUID(), obj.GetResourceVersion()
	err := c.Client.Update(ctx, obj, opts...)
	c.t.record(obj, uid, old, err)
	return err
}

func (c *recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	uid, old := obj.GetUID(), obj.GetResourceVersion()
	err := c.Client.Patch(ctx, obj, patch, opts...)
	c.t.record(obj, uid, old, err)
	return err
}

func (c *recordingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	uid, old := obj.GetUID(), obj.GetResourceVersion()
	// The answer to a delete does not come back into obj: judge by what the caller held.
	marked := len(obj.GetFinalizers()) > 0
	deleting := !obj.GetDeletionTimestamp().IsZero()
	err := c.Client.Delete(ctx, obj, opts...)
	switch {
	case err == nil && !marked, apierrors.IsNotFound(err):
		c.t.Forget(uid)
	case err == nil && !deleting:
		c.t.Wrote(uid, old)
	}
	// A repeated delete of an object already marked changes nothing that was not already
	// recorded; a failed one changes nothing at all.
	return err
}

func (c *recordingClient) Status() client.SubResourceWriter {
	return subResourceWriter{SubResourceWriter: c.Client.Status(), t: c.t}
}

func (c *recordingClient) SubResource(subResource string) client.SubResourceClient {
	sc := c.Client.SubResource(subResource)
	return subResourceClient{SubResourceReader: sc, subResourceWriter: subResourceWriter{SubResourceWriter: sc, t: c.t}}
}

type subResourceClient struct {
	client.SubResourceReader
	subResourceWriter
}

// subResourceWriter records updates and patches of a subresource; Create (an eviction, a
// token request) makes a new object rather than replace a version of obj.
type subResourceWriter struct {
	client.SubResourceWriter
	t *Tracker
}

func (w subResourceWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	uid, old := obj.GetUID(), obj.GetResourceVersion()
	err := w.SubResourceWriter.Update(ctx, obj, opts...)
	w.t.record(obj, uid, old, err)
	return err
}

func (w subResourceWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	uid, old := obj.GetUID(), obj.GetResourceVersion()
	err := w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	w.t.record(obj, uid, old, err)
	return err
}

// record notes the outcome of an update or patch of obj, whose uid and version were uid and
// old before the call and which the answer, when err is nil, filled in.
func (t *Tracker) record(obj client.Object, uid types.UID, old string, err error) {
	if uid == "" {
		uid = obj.GetUID() // an object built by the caller learns its uid from the answer
	}
	switch {
	case uid == "":
	case apierrors.IsNotFound(err):
		t.Forget(uid)
	case err != nil:
	case !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0:
		t.Forget(uid) // the last finalizer went: the object is gone
	default:
		t.Wrote(uid, old)
	}
}
