import { BotApiError, BotApiNetworkError } from "./errors.js";

/** The statuses worth another try: the operator asked for it (429; 503 while it restarts or its store is away) or a proxy in between failed (502, 504). */
const retryableStatuses = new Set([429, 502, 503, 504]);

/** Follows an error's `cause` chain (at most a few links: a chain may loop). */
function* chain(err: unknown): Generator<unknown> {
  for (let i = 0; i < 16 && err !== undefined && err !== null; i++) {
    yield err;
    err = (err as { cause?: unknown }).cause;
  }
}

/** Whether err is an abort: an AbortSignal's default reason, its timeout, or Node's AbortError. */
export function isAbortError(err: unknown): boolean {
  if (typeof err !== "object" || err === null) {
    return false;
  }
  const { name, code } = err as { name?: unknown; code?: unknown };
  return name === "AbortError" || name === "TimeoutError" || code === "ABORT_ERR";
}

/**
 * Whether a request that failed with err is worth another try, after a pause (or the Retry-After
 * the answer carried): the rule of the Go client's `botclient.Retryable`. Retryable are a
 * {@link BotApiError} of 429, 502, 503 or 504, and a {@link BotApiNetworkError} (no answer came,
 * or none in time). Nothing else is: not an abort (the caller's AbortSignal, like a cancelled Go
 * context), not any other answer (a 4xx will not change; nor does a 500), not a body that is not
 * JSON. Like errors.As in Go, the error's `cause` chain is looked through, so a wrapped error
 * counts as what it wraps; an abort anywhere in the chain is never retried.
 */
export function isRetryable(err: unknown): boolean {
  for (const e of chain(err)) {
    if (isAbortError(e)) {
      return false;
    }
  }
  for (const e of chain(err)) {
    if (e instanceof BotApiError) {
      return retryableStatuses.has(e.status);
    }
    if (e instanceof BotApiNetworkError) {
      return true;
    }
  }
  return false;
}

/** The Retry-After (ms) an error in err's chain carried, or 0. */
export function retryAfterOf(err: unknown): number {
  for (const e of chain(err)) {
    if (e instanceof BotApiError) {
      return e.retryAfterMs ?? 0;
    }
  }
  return 0;
}

/**
 * Waits ms, or rejects with the signal's reason when it aborts first (as `fetch` does), so a
 * caller's abort surfaces as the same error wherever it strikes.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** How {@link retry} retries. */
export interface RetryOptions {
  /** How many times to call, at least once. Default 5. */
  attempts?: number | undefined;
  /** The first pause, in ms, doubled after each retry. Default 200. */
  firstDelayMs?: number | undefined;
  /** The longest pause, in ms, unless an answer's Retry-After asks for longer. Default 5000. */
  maxDelayMs?: number | undefined;
  /** Stops the retrying: the pause rejects with the signal's reason. Pass the same signal to the call. */
  signal?: AbortSignal | undefined;
  /** Told of each failure that will be retried, and the pause before the next try. */
  onRetry?: ((err: unknown, attempt: number, delayMs: number) => void) | undefined;
}

/**
 * Calls call until it succeeds, fails with an error that is not {@link isRetryable}, or has been
 * tried `attempts` times, and returns its result or throws its last error: what a bot should do
 * with the operator's 429s and 503s. Between tries it pauses, doubling from `firstDelayMs` up to
 * `maxDelayMs`, and at least the Retry-After of the answer (the Go client's `botclient.Retry`
 * pauses the same way but does not look at Retry-After; its WaitForBinding does).
 *
 * ```ts
 * await retry(() => client.reportStatus(bot, { phase: Phase.InCall }), { signal });
 * ```
 */
export async function retry<T>(call: (attempt: number) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const attempts = Math.max(1, options.attempts ?? 5);
  const most = options.maxDelayMs ?? 5000;
  let wait = options.firstDelayMs ?? 200;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call(attempt);
    } catch (err) {
      if (!isRetryable(err) || attempt >= attempts) {
        throw err;
      }
      const delay = Math.max(wait, retryAfterOf(err));
      options.onRetry?.(err, attempt, delay);
      await sleep(delay, options.signal);
      wait = Math.min(2 * wait, most);
    }
  }
}
