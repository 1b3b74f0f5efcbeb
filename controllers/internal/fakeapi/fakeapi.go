// Package fakeapi is the API server of the controllers' single-pass tests: controller-runtime's
// fake client with the status subresource of the three kinds and the controllers' own cache
// indexes (index.Setup), so a table runs against the indexes the manager has rather than
// copies. Only tests import it.
//
// # Where things are
//
//	fakeapi.go  New: the fake client, and the indexer that registers index.Setup on its builder
package fakeapi

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/index"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// New is a fake client holding objs, with funcs to inject errors.
func New(t testing.TB, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(bt.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1.BotPoolSlot{}, &v1.Bot{}, &v1.BotPool{}).
		WithInterceptorFuncs(funcs)
	if err := index.Setup(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// builderIndexer registers indexes on a fake client builder.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}
