package callback

import (
	"context"
	"errors"
	"slices"
	"time"

	"botpool.dev/botpool/store"
)

// SecretSource reads the signing keys messages name, from the Secret namespace/name only when
// it is opted in for the operator's use.
type SecretSource interface {
	// WebhookKeys reads the Secret namespace/name once and returns, for each of keys in order,
	// its key decoded by DecodeSecret (so at most MaxKeyLen bytes, sharing no memory with the
	// Secret) or why it cannot sign; err when the Secret cannot be used at all (missing, not
	// opted in, unreadable). Nothing else of the Secret is returned or kept.
	WebhookKeys(ctx context.Context, namespace, name string, keys []string) ([]SigningKey, error)
}

// SigningKey is one key of a Secret as a SecretSource read it: Key, or Err.
type SigningKey struct {
	Key []byte
	Err error
}

// secretReadTimeout bounds one read of a signing Secret: a slow API server delays a pass, it
// does not hold it.
const secretReadTimeout = 10 * time.Second

// errNoKey: the SecretSource gave no key for a message's (a bug, refused rather than sent
// unsigned).
var errNoKey = errors.New("no signing key was read for the message")

// secretRef names a Secret.
type secretRef struct{ namespace, name string }

// passKeys are the signing keys one pass read. Each Secret is read once, for every key of it
// the batch that first names it needs, and the decoded keys are shared by all the messages of
// the pass that use them, so a pass holds one copy of each key (at most MaxKeyLen bytes)
// however many messages name it. A Secret that cannot be used is not read again in the pass;
// only a key of it first named by a later batch of the pass reads it once more.
type passKeys map[secretRef]*passSecret

type passSecret struct {
	err  error // the Secret cannot be used at all
	keys map[string]SigningKey
}

// read reads, once per Secret, the keys the messages of ms name that the pass has not read yet.
func (r *Relay) read(ctx context.Context, keys passKeys, ms []store.OutboxMessage) {
	var refs []secretRef // in the order the batch names them
	want := map[secretRef][]string{}
	for _, m := range ms {
		if m.SecretName == "" {
			continue
		}
		ref := secretRef{m.Namespace, m.SecretName}
		if s, ok := keys[ref]; ok {
			if _, read := s.keys[m.SecretKey]; read || s.err != nil {
				continue
			}
		}
		names, ok := want[ref]
		if !ok {
			refs = append(refs, ref)
		}
		if !slices.Contains(names, m.SecretKey) {
			want[ref] = append(names, m.SecretKey)
		}
	}
	for _, ref := range refs {
		s := keys[ref]
		if s == nil {
			s = &passSecret{keys: map[string]SigningKey{}}
			keys[ref] = s
		}
		names := want[ref]
		got, err := r.readSecret(ctx, ref, names)
		if err == nil && len(got) != len(names) {
			err = errNoKey
		}
		switch {
		case err != nil && len(s.keys) == 0:
			s.err = err // not read again this pass, whatever key a message names
		case err != nil:
			for _, name := range names { // the keys read before stay good
				s.keys[name] = SigningKey{Err: err}
			}
		default:
			for i, k := range got {
				s.keys[names[i]] = checked(k)
			}
		}
	}
}

func (r *Relay) readSecret(ctx context.Context, ref secretRef, names []string) ([]SigningKey, error) {
	ctx, cancel := context.WithTimeout(ctx, secretReadTimeout)
	defer cancel()
	return r.opts.Secrets.WebhookKeys(ctx, ref.namespace, ref.name, names)
}

// key is m's signing key as the pass read it.
func (keys passKeys) key(m store.OutboxMessage) ([]byte, error) {
	s := keys[secretRef{m.Namespace, m.SecretName}]
	if s == nil {
		return nil, errNoKey
	}
	if s.err != nil {
		return nil, s.err
	}
	k, ok := s.keys[m.SecretKey]
	if !ok {
		return nil, errNoKey
	}
	return k.Key, k.Err
}

// checked holds a source to its contract: a key neither empty nor above MaxKeyLen, so what the
// relay keeps stays bounded whatever the source.
func checked(k SigningKey) SigningKey {
	switch {
	case k.Err != nil:
		return SigningKey{Err: k.Err}
	case len(k.Key) == 0:
		return SigningKey{Err: errNoKey}
	case len(k.Key) > MaxKeyLen:
		return SigningKey{Err: ErrKeyTooLarge}
	}
	return k
}
