package policy

import "time"

// StrayAfter is how long a free slot's application may still read running after the slot
// stopped its container: Coolify's status lags the container by up to a minute, and the
// shared list the slot reads is up to appCheck old.
const StrayAfter = 2 * time.Minute
