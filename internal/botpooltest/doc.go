// Package botpooltest holds what the tests of several packages share: fluent builders of
// pools, bots and slots (MakePool(ns, name).MaxSlots(1).MinIdle(1).Obj()) and small fakes of
// the controllers' collaborators, so that a test names only what matters to it instead of
// repeating a struct literal, and a new required field is added in one place.
package botpooltest
