package main

import (
	"errors"
	"fmt"
)

// What one manager process runs (--components). One binary serves all three, so that the
// chart can run the internet-facing bot API apart from the controllers (botApi.separate), under
// a ServiceAccount that may not touch a Secret:
//
//   - all (the default): the controllers, the callback notifier, the webhook relay and the
//     retention job on the elected leader, and the bot API on every replica;
//   - controllers: all of that but the bot API;
//   - bot-api: the bot API alone. No controllers, so no leader election (--leader-elect is
//     ignored: the process would otherwise campaign for the controllers' Lease), no retention
//     job, no notifier or relay, no Coolify client and no read of the kube-system namespace.
//
// Apart, the two share what two replicas of `all` already share: the API server and Postgres
// (heartbeats and bot events reach the controllers through the store, hence --database-url).
// What they no longer share is the in-process record of Bot writes; see run.
const (
	componentsAll         = "all"
	componentsControllers = "controllers"
	componentsBotAPI      = "bot-api"
)

// runsControllers reports whether this process runs the controllers (and with them leader
// election, the retention job and the webhook relay).
func (o options) runsControllers() bool { return o.components != componentsBotAPI }

// servesBotAPI reports whether this process serves the bot API.
func (o options) servesBotAPI() bool { return o.components != componentsControllers }

// validateComponents checks --components and the flags that only make sense with some of them.
func (o options) validateComponents() error {
	switch o.components {
	case componentsAll, componentsControllers, componentsBotAPI:
	default:
		return fmt.Errorf("--components %q: want %s (controllers and bot API), %s (no bot API) or %s (the bot API alone)",
			o.components, componentsAll, componentsControllers, componentsBotAPI)
	}
	var errs []error
	if o.components != componentsAll && o.databaseURL == "" {
		// The in-memory store lives in one process: the bot API's heartbeats would never reach
		// the Bot controller, which would fail every running bot for silence.
		errs = append(errs, fmt.Errorf("--components=%s needs --database-url (Postgres): the bot API and the controllers share heartbeats "+
			"and bot events through the store, and the in-memory store is per process", o.components))
	}
	if !o.servesBotAPI() && (o.hardening.botAPITLSCertFile != "" || o.hardening.botAPITLSKeyFile != "") {
		errs = append(errs, errors.New("--bot-api-tls-cert-file and --bot-api-tls-key-file: --components=controllers serves no bot API; "+
			"give them to the bot-api process"))
	}
	return errors.Join(errs...)
}
