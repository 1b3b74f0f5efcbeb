// Package controllers holds one reconciler per kind: the BotPool controller keeps the supply
// of slots, the BotPoolSlot controller drives one Coolify application through its lifecycle,
// and the Bot controller binds bots to free slots and follows them to the end of the meeting.
//
// The RBAC markers below are the manager's whole contract with the API server; controller-gen
// turns them into config/rbac/role.yaml and the Helm chart's ClusterRole.
//
// +kubebuilder:rbac:groups=botpool.dev,resources=bots;botpoolslots;botpools,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=botpool.dev,resources=bots/status;botpoolslots/status;botpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=botpool.dev,resources=bots/finalizers;botpoolslots/finalizers;botpools/finalizers,verbs=update
// Secrets: get (credentials, slotEnvFrom and the slots' own token Secrets, each read past the
// cache: the manager caches no Secrets, so needs no list or watch), create and delete (a
// slot's token Secret; a token is replaced, never updated).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
package controllers
