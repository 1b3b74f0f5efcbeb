// Package coolifyview is the controllers' access to Coolify: the narrow API they call
// (CoolifyAPI, declared where it is used), each pool's client from its credentials Secret
// (Connector, SecretConnector), the bulk reads one pass shares with every slot (BulkReader:
// a pool's applications and active deployments, a Coolify user's servers and their Docker
// cleanup schedules), the tags and owner marks that tie an application to its pool, and what
// the controllers learn of each server from those reads (its limits, its health, whether a
// pool's starts keep failing there).
//
// # Where things are
//
//	coolify_api.go       CoolifyAPI, the Coolify calls the controllers make; which instance a client talks to
//	coolify_reads.go     BulkReader: a pool's applications and active deployments, listed once for all slots (and a user's servers)
//	coolify_tags.go      the pool's Coolify tag and the owner mark on application descriptions
//	credentials.go       a pool's Coolify credentials (Connector, SecretConnector)
//	server_limits.go     what each Coolify server runs at once (GET /servers, cached per user): ServerFor, CoolifyServer
//	server_failures.go   a server where a pool's own starts keep failing is Failing for that pool (StartEnded, MarkFailing)
//	server_cleanup.go    when each server's Docker cleanup runs (GET /servers/{uuid}/docker-cleanup, cached per user), for the pre-pull's re-pulls
package coolifyview
