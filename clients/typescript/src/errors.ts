import type { ErrorResponse } from "./types.js";

/** What {@link BotApiError} keeps of an answer's body, at most. */
const MAX_BODY = 64 * 1024;

/**
 * An answer of the bot API other than 2xx. `status` is its HTTP status, `serverMessage` the
 * `error` of its JSON body (`{"error": "..."}`, docs/botapi.md), or the status text when the body
 * had none (a proxy's page). The getters name the statuses a bot acts on, like the Go client's
 * sentinel errors (botclient.ErrSlotFree, ErrGone…).
 */
export class BotApiError extends Error {
  override readonly name = "BotApiError";
  /** The HTTP status. */
  readonly status: number;
  /** The `error` of the answer's body, or the status text when it had none. */
  readonly serverMessage: string;
  /** The answer's body, as received (its first 64 KiB). */
  readonly body: string;
  /** The answer's Retry-After in milliseconds, when it had one. */
  readonly retryAfterMs: number | undefined;
  /** The request's method and path (with its query). */
  readonly method: string;
  readonly path: string;

  constructor(init: {
    status: number;
    serverMessage: string;
    body?: string | undefined;
    retryAfterMs?: number | undefined;
    method: string;
    path: string;
  }) {
    super(`bot API answered ${init.status}: ${init.serverMessage}`);
    this.status = init.status;
    this.serverMessage = init.serverMessage;
    this.body = (init.body ?? "").slice(0, MAX_BODY);
    this.retryAfterMs = init.retryAfterMs;
    this.method = init.method;
    this.path = init.path;
  }

  /** 404 on config: no bot is bound to this slot yet; ask again. */
  get slotFree(): boolean {
    return this.status === 404;
  }
  /** 410: the bot is finished, gone, or no longer this slot's (on any call once its slot let go of an ended bot); exit. */
  get gone(): boolean {
    return this.status === 410;
  }
  /** 401: the token is missing or wrong; on a bot call, also once the binding has ended (exit). */
  get unauthorized(): boolean {
    return this.status === 401;
  }
  /** 403: the credential does not authorize this bot (or the slot token another application). */
  get forbidden(): boolean {
    return this.status === 403;
  }
  /**
   * 409: the reported phase is not a valid next phase; on config, the binding was already handed
   * out (exit), or, waiting, a newer request of this slot took this one's place.
   */
  get conflict(): boolean {
    return this.status === 409;
  }
  /** 429: slow down, and send again after {@link retryAfterMs}. */
  get rateLimited(): boolean {
    return this.status === 429;
  }
}

/**
 * A request that got no answer: the connection failed, or no answer came within the request's
 * timeout (`timedOut`). Retryable (see {@link isRetryable}), as the Go client retries a
 * `net.Error`.
 */
export class BotApiNetworkError extends Error {
  override readonly name = "BotApiNetworkError";
  /** True when no answer came within the request's timeout. */
  readonly timedOut: boolean;
  readonly method: string;
  readonly path: string;

  constructor(message: string, init: { method: string; path: string; timedOut?: boolean; cause?: unknown }) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.timedOut = init.timedOut ?? false;
    this.method = init.method;
    this.path = init.path;
  }
}

/** The client's configuration is missing or invalid (see `BotClient.fromEnv`). */
export class BotClientConfigError extends Error {
  override readonly name = "BotClientConfigError";
  /** The environment variables that were missing, if that is the problem. */
  readonly missing: string[];

  constructor(message: string, missing: string[] = []) {
    super(message);
    this.missing = missing;
  }
}

/** Builds the error of a non-2xx answer. */
export function errorOf(res: Response, body: string, method: string, path: string): BotApiError {
  let serverMessage = "";
  try {
    const parsed = JSON.parse(body) as Partial<ErrorResponse> | null;
    if (parsed && typeof parsed.error === "string") {
      serverMessage = parsed.error;
    }
  } catch {
    // not JSON: a proxy's page
  }
  if (serverMessage === "") {
    serverMessage = res.statusText || `HTTP ${res.status}`;
  }
  return new BotApiError({
    status: res.status,
    serverMessage,
    body,
    retryAfterMs: parseRetryAfter(res.headers.get("Retry-After")),
    method,
    path,
  });
}

/**
 * Reads a Retry-After header: whole seconds (what the bot API sends) or an HTTP date (what a
 * proxy may send), in milliseconds; undefined when absent, invalid or not in the future.
 */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) {
    return undefined;
  }
  const v = value.trim();
  if (/^\d+$/.test(v)) {
    const secs = Number(v);
    return secs > 0 ? secs * 1000 : undefined;
  }
  const at = Date.parse(v);
  if (Number.isNaN(at) || at <= now) {
    return undefined;
  }
  return at - now;
}
