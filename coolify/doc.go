// Package coolify is the operator's client for the Coolify v4 API: the narrow set of calls a bot
// pool needs (servers, projects, docker-image applications, envs, deployments), with a rate
// limiter per Coolify user (URL and token), a bulkhead per instance that its users share fairly
// and a breaker per user (Registry, Instance), retries that honour Retry-After, typed errors,
// version gating and Prometheus metrics.
//
// The behaviour it follows is the server's, as written down in docs/coolify.md, not the
// published openapi.yaml where the two disagree. *Client implements the API interface; the
// controllers depend only on the part of it they call (controllers.CoolifyAPI), so that unit
// tests can use a hand-written fake; behaviour tests use the simulator in coolify/sim.
package coolify
