package policy

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// ErrSecretNotAllowed: a Secret a pool names lacks the opt-in label v1.LabelAllowPoolUse. A
// person must label it (or point the pool elsewhere); the slot or pool reports Stalled.
var ErrSecretNotAllowed = errors.New("not allowed for use by BotPools")

// AllowedForPools refuses a Secret that does not carry v1.LabelAllowPoolUse="true". A pool
// sends its credentials Secret to a URL and its slotEnvFrom Secret into an image, both chosen
// by whoever edits the pool: without the opt-in, anyone allowed to edit a BotPool could read
// every Secret of the namespace through it. The error says the exact command that opts in.
func AllowedForPools(secret *corev1.Secret) error {
	if secret.Labels[v1.LabelAllowPoolUse] == "true" {
		return nil
	}
	return fmt.Errorf("%w: Secret %s lacks the label %s=true, which lets BotPools send its data to Coolify and into bot containers; if that is what it is for, run: %s",
		ErrSecretNotAllowed, secret.Name, v1.LabelAllowPoolUse, AllowCommand(secret.Namespace, secret.Name))
}

// AllowCommand is the command that opts a Secret in.
func AllowCommand(namespace, name string) string {
	return fmt.Sprintf("kubectl label secret %s -n %s %s=true", name, namespace, v1.LabelAllowPoolUse)
}
