// Package botparams holds what a bot's container is given besides its meeting: its
// parameters (spec.parameters over its pool's parameterDefaults) and its secret parameters
// (keys of Secrets of its namespace, spec.secretParameters). The bot controller checks both
// before the bot may be bound (Check); the bot API reads them again when it hands the binding
// out (Merge, Secrets), so the values reach the container that takes the binding and nothing
// else: no Kubernetes object, status, Event, log line or store row holds a secret value.
package botparams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// The size limits (docs/bots.md). The API server bounds the top-level keys of parameters (64)
// and the number of secret parameters (16); these bound the bytes, which its schema cannot.
const (
	// MaxParametersBytes bounds a bot's parameters merged over its pool's defaults, as JSON.
	MaxParametersBytes = 32 << 10
	// MaxSecretValueBytes bounds one secret parameter's value.
	MaxSecretValueBytes = 8 << 10
	// MaxSecretBytes bounds a bot's secret parameters' values together.
	MaxSecretBytes = 32 << 10
)

// Problem is why a bot's parameters cannot be handed to its container: Reason is the reason
// of its ParametersReady condition (v1.ReasonParameterSecretNotFound, …), Message says what
// to fix. It never holds a secret value.
type Problem struct {
	Reason  string
	Message string
}

func (p *Problem) Error() string { return p.Reason + ": " + p.Message }

// AsProblem returns the Problem in err's chain, or nil.
func AsProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return nil
}

// Merge returns the parameters a bot's container gets: its pool's defaults with the bot's
// top-level keys over them (a key the bot sets replaces the default's whole value), or the
// bot's own exactly as stored when the pool has none; nil when neither has any. Past
// MaxParametersBytes it is a Problem (ParametersTooLarge).
func Merge(defaults, own *apiextensionsv1.JSON) (json.RawMessage, error) {
	d, o := raw(defaults), raw(own)
	var out json.RawMessage
	switch {
	case d == nil && o == nil:
		return nil, nil
	case d == nil:
		out = o
	case o == nil:
		out = d
	default:
		merged := map[string]json.RawMessage{}
		if err := json.Unmarshal(d, &merged); err != nil {
			return nil, fmt.Errorf("the pool's parameterDefaults are not a JSON object: %w", err)
		}
		var mine map[string]json.RawMessage
		if err := json.Unmarshal(o, &mine); err != nil {
			return nil, fmt.Errorf("the bot's parameters are not a JSON object: %w", err)
		}
		for k, v := range mine {
			merged[k] = v
		}
		var err error
		if out, err = json.Marshal(merged); err != nil {
			return nil, err
		}
	}
	if len(out) > MaxParametersBytes {
		return nil, &Problem{Reason: v1.ReasonParametersTooLarge, Message: fmt.Sprintf(
			"spec.parameters over the pool's parameterDefaults take %d bytes as JSON; at most %d fit", len(out), MaxParametersBytes)}
	}
	return out, nil
}

// raw is j's JSON, nil for none (JSON null included: an object nobody wrote).
func raw(j *apiextensionsv1.JSON) json.RawMessage {
	if j == nil || len(j.Raw) == 0 || bytes.Equal(bytes.TrimSpace(j.Raw), []byte("null")) {
		return nil
	}
	return j.Raw
}

// Secrets reads the values of the bot's secretParameters, past any cache (r should be an API
// reader: the manager caches no Secrets), each Secret once. A Secret that is missing, lacks
// v1.LabelAllowBotParameters, lacks the key, or holds a value that is too large or not UTF-8
// text is a Problem naming it; any other error is the API server's. nil when the bot has
// none.
func Secrets(ctx context.Context, r client.Reader, bot *v1.Bot) (map[string]string, error) {
	refs := bot.Spec.SecretParameters
	if len(refs) == 0 {
		return nil, nil
	}
	read := map[string]*corev1.Secret{}
	values := make(map[string]string, len(refs))
	total := 0
	for _, p := range refs {
		ref := p.SecretKeyRef
		secret, ok := read[ref.Name]
		if !ok {
			secret = &corev1.Secret{}
			if err := r.Get(ctx, client.ObjectKey{Namespace: bot.Namespace, Name: ref.Name}, secret); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, &Problem{Reason: v1.ReasonParameterSecretNotFound, Message: fmt.Sprintf(
						"Secret %s of secret parameter %s does not exist in namespace %s", ref.Name, p.Name, bot.Namespace)}
				}
				return nil, fmt.Errorf("reading Secret %s of secret parameter %s: %w", ref.Name, p.Name, err)
			}
			read[ref.Name] = secret
		}
		if secret.Labels[v1.LabelAllowBotParameters] != "true" {
			return nil, &Problem{Reason: v1.ReasonParameterSecretNotAllowed, Message: fmt.Sprintf(
				"Secret %s lacks the label %s=true, which lets Bots hand its keys to their containers; if that is what it is for, run: kubectl label secret %s -n %s %s=true",
				ref.Name, v1.LabelAllowBotParameters, ref.Name, bot.Namespace, v1.LabelAllowBotParameters)}
		}
		value, ok := secret.Data[ref.Key]
		if !ok {
			return nil, &Problem{Reason: v1.ReasonParameterSecretNotFound, Message: fmt.Sprintf(
				"Secret %s has no key %s (secret parameter %s)", ref.Name, ref.Key, p.Name)}
		}
		if len(value) > MaxSecretValueBytes {
			return nil, &Problem{Reason: v1.ReasonParameterSecretTooLarge, Message: fmt.Sprintf(
				"key %s of Secret %s (secret parameter %s) holds %d bytes; at most %d fit", ref.Key, ref.Name, p.Name, len(value), MaxSecretValueBytes)}
		}
		if !utf8.Valid(value) {
			return nil, &Problem{Reason: v1.ReasonParameterSecretInvalid, Message: fmt.Sprintf(
				"key %s of Secret %s (secret parameter %s) is not UTF-8 text; store the value as text (base64-encode binary data yourself)", ref.Key, ref.Name, p.Name)}
		}
		if total += len(value); total > MaxSecretBytes {
			return nil, &Problem{Reason: v1.ReasonParameterSecretTooLarge, Message: fmt.Sprintf(
				"the secret parameters hold more than %d bytes together", MaxSecretBytes)}
		}
		values[p.Name] = string(value)
	}
	return values, nil
}

// Check reports whether the bot's parameters can be handed to its container as things stand:
// nil when they can (or it has none), a Problem when the bot must wait for a fix, another
// error when the API server did not answer.
func Check(ctx context.Context, r client.Reader, bot *v1.Bot, pool *v1.BotPool) error {
	if _, err := Merge(pool.Spec.ParameterDefaults, bot.Spec.Parameters); err != nil {
		return err
	}
	_, err := Secrets(ctx, r, bot)
	return err
}
