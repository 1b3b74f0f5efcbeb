package postgres_test

import (
	"testing"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := newStore(t)
		return s
	})
}
