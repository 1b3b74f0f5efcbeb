package botapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/botparams"
)

// parametersRetry is the Retry-After of a config request whose bot's parameters cannot be
// read now: a person fixes the Secret, so asking every second would gain nothing.
const parametersRetry = 5 * time.Second

// parametersOf reads what the bot's container gets besides its meeting: its parameters over
// its pool's parameterDefaults, and the values of its secretParameters, read past the cache
// from Secrets of the bot's own namespace (botparams.Secrets). It runs before the binding is
// claimed, so a container refused here (503: a Secret went missing or changed since the bot
// controller checked it) keeps its binding and asks again. The values go into this answer
// alone: nothing here logs, records or keeps them.
//
// A refusal is remembered for parametersRetry: a container that asks again sooner (ignoring
// Retry-After, or in a loop) gets the same answer without another read, so no container can
// turn its rate limit into Secret reads that the API server's budget, shared by every
// namespace, pays for.
func (s *Server) parametersOf(ctx context.Context, slot *v1.BotPoolSlot, bot *v1.Bot) (json.RawMessage, map[string]string, error) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	last, ok := s.refused[bot.UID]
	s.mu.Unlock()
	if ok && now.Sub(last.at) < parametersRetry {
		return nil, nil, last.err
	}
	params, secrets, err := s.readParameters(ctx, slot, bot)
	var ae *apiError
	if errors.As(err, &ae) {
		s.mu.Lock()
		if len(s.refused) >= pruneAbove {
			for uid, r := range s.refused {
				if now.Sub(r.at) >= parametersRetry {
					delete(s.refused, uid)
				}
			}
		}
		s.refused[bot.UID] = refusal{at: now, err: ae}
		s.mu.Unlock()
	}
	return params, secrets, err
}

// refusal is a parameters refusal and when it was given.
type refusal struct {
	at  time.Time
	err *apiError
}

// readParameters reads the bot's parameters and secret parameters (parametersOf).
func (s *Server) readParameters(ctx context.Context, slot *v1.BotPoolSlot, bot *v1.Bot) (json.RawMessage, map[string]string, error) {
	var defaults *apiextensionsv1.JSON
	pool := &v1.BotPool{}
	switch err := s.cfg.Cache.Get(ctx, client.ObjectKey{Namespace: slot.Namespace, Name: slot.Spec.Pool}, pool); {
	case err == nil:
		defaults = pool.Spec.ParameterDefaults
	case !apierrors.IsNotFound(err): // a pool deleted outright has no defaults left to give
		return nil, nil, err
	}
	params, err := botparams.Merge(defaults, bot.Spec.Parameters)
	if err != nil {
		return nil, nil, parametersRefused(err)
	}
	secrets, err := botparams.Secrets(ctx, s.cfg.APIReader, bot)
	if err != nil {
		return nil, nil, parametersRefused(err)
	}
	return params, secrets, nil
}

// parametersRefused answers a request whose bot's parameters cannot be handed out: 503 with
// the problem (which names Secrets and keys, never a value), or the API server's error.
func parametersRefused(err error) error {
	if p := botparams.AsProblem(err); p != nil {
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: parametersRetry,
			msg: "the bot's parameters cannot be handed out (" + p.Reason + "): " + p.Message + "; ask again"}
	}
	return err
}
