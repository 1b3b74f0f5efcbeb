package controllers

import "time"

// strayAfter is how long a free slot's application may still read running after the slot
// stopped its container: Coolify's status lags the container by up to a minute, and the
// shared list the slot reads is up to appCheck old.
const strayAfter = 2 * time.Minute
