package botapi

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"botpool.dev/botpool/internal/cachelag"
)

// What the bot API needs of the API server, and nothing more: with --components=bot-api the
// chart grants it this role alone (config/rbac/bot_api_role.yaml, generated from these markers
// only), under a ServiceAccount of its own. It reads Bots and BotPoolSlots through its cache
// (list and watch) and Bots past it (get: APIReader, never a slot), patches Bot status (the
// binding claim, the phases bots report), and records the Warning Event of a binding claimed
// twice (events.k8s.io, the API of the manager's recorder). It reads BotPools through its
// cache (a bot's parameters go over its pool's parameterDefaults). It reads a Secret only to
// hand a bot's secretParameters to the container that claims its binding (get, past the cache:
// only Secrets the bound Bot names, in its own namespace, labelled
// botpool.dev/allow-bot-parameters); it writes none (a token is checked against the hash its
// slot records, see index.go) and never writes a slot: binding is the dispatcher's.
// +kubebuilder:rbac:groups=botpool.dev,resources=bots,verbs=get;list;watch
// +kubebuilder:rbac:groups=botpool.dev,resources=botpools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=botpool.dev,resources=botpoolslots,verbs=list;watch
// +kubebuilder:rbac:groups=botpool.dev,resources=bots/status,verbs=patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// AddToManager registers the bot API's cache indexes on mgr and adds the server, which every
// replica runs (see NeedLeaderElection). Cache and APIReader default to the manager's, Client
// to the manager's recording in cfg.Writes, Informers (what wakes waiting config requests) to
// the manager's cache.
// The manager and the envtest suites call it; the model check, which starts no manager,
// indexes its own cache and serves the Handler.
func AddToManager(ctx context.Context, mgr manager.Manager, cfg Config) error {
	if cfg.Cache == nil {
		cfg.Cache = mgr.GetCache()
	}
	if cfg.Informers == nil {
		cfg.Informers = mgr.GetCache()
	}
	if cfg.Recorder == nil {
		cfg.Recorder = mgr.GetEventRecorder("botpool")
	}
	if cfg.Client == nil {
		// Recording in Writes, as the controllers' client does: the Bot controller must wait
		// for the cache after a report (no hand-written record is left to forget).
		cfg.Client = cachelag.NewClient(mgr.GetClient(), cfg.Writes)
	}
	if cfg.APIReader == nil {
		cfg.APIReader = mgr.GetAPIReader()
	}
	if err := IndexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing for the bot API: %w", err)
	}
	if err := mgr.Add(New(cfg)); err != nil {
		return fmt.Errorf("adding the bot API: %w", err)
	}
	return nil
}
