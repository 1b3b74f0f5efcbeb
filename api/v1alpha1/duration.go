package v1alpha1

import "time"

// Duration is a positive Go duration string such as "30s", "5m" or "1h30m".
//
// It is a string rather than metav1.Duration so that one type-level rule validates every
// duration field of the API in the CRD itself: a negative, zero or malformed value is refused
// by the API server instead of failing later in a controller.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="must be a positive duration such as 30s, 5m or 1h30m"
type Duration string

// Duration returns the parsed value, or 0 when d is empty or malformed (which the CRD refuses,
// so 0 only appears for objects that bypassed validation; callers fall back to defaults).
func (d Duration) Duration() time.Duration {
	v, err := time.ParseDuration(string(d))
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// OrDefault returns the parsed value, or def when d is unset.
func (d Duration) OrDefault(def time.Duration) time.Duration {
	if v := d.Duration(); v > 0 {
		return v
	}
	return def
}
