import { parseDuration, formatDuration } from "./duration.js";
import { BotApiError, BotApiNetworkError, BotClientConfigError, errorOf } from "./errors.js";
import { isRetryable, retryAfterOf, sleep } from "./retry.js";
import type {
  BotConfig,
  BotEvent,
  EventsResponse,
  HeartbeatResponse,
  SpeakerTimeframe,
  StatusReport,
  StatusResponse,
} from "./types.js";

/** The environment variable set to "1" in a pool's image pre-pull container (see {@link isPrePull}). */
export const PREPULL_ENV = "BOTPOOL_PREPULL";
/** The environment variables the operator sets in every slot's container. */
export const ENV_API_URL = "BOTPOOL_API_URL";
export const ENV_SLOT_UUID = "POOL_SLOT_UUID";
export const ENV_SLOT_TOKEN = "BOTPOOL_SLOT_TOKEN";

/** The wait {@link BotClient.waitForBinding} asks the operator for when given none (ms). */
export const DEFAULT_WAIT_MS = 30_000;
/** The longest wait the operator accepts (ms); a longer one is refused (400). */
export const MAX_WAIT_MS = 60_000;
/** A request's timeout when given none (ms), as the Go client's http.Client. */
export const DEFAULT_TIMEOUT_MS = 10_000;
/** The heartbeat period of {@link BotClient.keepBeating} before any configuration says one (ms). */
const DEFAULT_HEARTBEAT_MS = 10_000;

/** A waiting config request's timeout is its wait and this much more (ms), as in the Go client. */
const WAIT_SLACK_MS = 10_000;
/** The pauses after transient failures grow from first to most (ms), as in the Go client. */
const FIRST_BACKOFF_MS = 200;
const MOST_BACKOFF_MS = 5_000;

/** The environment a client is configured from: `process.env` or any map of the same shape. */
export type Env = Record<string, string | undefined>;

/**
 * Whether this container was started only to pull its image (`BOTPOOL_PREPULL=1`): it has no
 * slot, no API URL and no token, and should exit at once with status 0, before it opens any
 * connection. A bot's main asks this first.
 */
export function isPrePull(env: Env = process.env): boolean {
  return env[PREPULL_ENV] === "1";
}

/** How a {@link BotClient} talks to the bot API. */
export interface BotClientOptions {
  /** The API's base URL (`BOTPOOL_API_URL`), e.g. `http://botpool-bot-api.botpool-system.svc:8082`. */
  baseUrl: string;
  /** The slot's Coolify application uuid (`POOL_SLOT_UUID`). */
  appUuid: string;
  /** The slot's token (`BOTPOOL_SLOT_TOKEN`, starts with `bpt_`): it only fetches the configuration. */
  token: string;
  /** A request's timeout in ms (default 10 000); a waiting config request gets its wait and 10 s more at least. */
  timeoutMs?: number | undefined;
  /** The fetch to use (default: the global one), for a proxy agent or a test. */
  fetch?: typeof globalThis.fetch | undefined;
}

/** Options of one call. */
export interface CallOptions {
  /** Aborts the call: it rejects with the signal's reason, which is never retryable. */
  signal?: AbortSignal | undefined;
  /** This call's timeout in ms, instead of the client's. */
  timeoutMs?: number | undefined;
}

/** Options of {@link BotClient.waitForBinding}. */
export interface WaitOptions {
  /** How long one request waits for a binding, in ms: 1 to 60 000, default 30 000. */
  waitMs?: number | undefined;
  /** Stops waiting: the call rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
  /** Told of each transient failure before it is retried, and the pause before the next try. */
  onRetry?: ((err: unknown, delayMs: number) => void) | undefined;
}

/** Options of {@link BotClient.keepBeating}. */
export interface KeepBeatingOptions {
  /** The period in ms; default: the `heartbeatInterval` of the configuration this client received. */
  intervalMs?: number | undefined;
  /** Stops the heartbeats: the loop resolves with action "stopped". */
  signal?: AbortSignal | undefined;
  /** Told of every answer (its `logLevel`, whether it was `buffered`). */
  onHeartbeat?: ((answer: HeartbeatResponse) => void) | undefined;
  /** Told of each transient failure before it is retried, and the pause before the next try. */
  onRetry?: ((err: unknown, delayMs: number) => void) | undefined;
}

/** How {@link BotClient.keepBeating} ended. */
export interface BeatingResult {
  /**
   * What the bot does now. "leave": leave the meeting gracefully, report Leaving (optional),
   * CallEnded and Done. "exit": stop now and report nothing more. "stopped": the loop's signal
   * was aborted (the bot stopped it).
   */
  action: "leave" | "exit" | "stopped";
  /**
   * Why: the heartbeat's answer ("leave", "exit"); "bindingEnded" when the operator refused the
   * credential (401: the slot no longer serves this bot; 410: the bot ended and its slot let go
   * of it; either way, exit); "stopped".
   */
  reason: "leave" | "exit" | "bindingEnded" | "stopped";
  /** The heartbeats answered. */
  beats: number;
  /** The last answer, if there was one. */
  last?: HeartbeatResponse;
  /** The 401 that ended the binding, when that is the reason. */
  error?: BotApiError;
}

/**
 * The client of the bot API for one slot's container. It keeps the binding credential of the
 * configuration it received ({@link config}, {@link waitForBinding}) and sends it, instead of the
 * slot token, with the bot calls ({@link heartbeat}, {@link reportStatus}, {@link sendEvents}):
 * the operator accepts only that credential there. Until it has one (an operator older than
 * binding credentials hands out none) the bot calls carry the slot token.
 *
 * Calls do not retry by themselves, except {@link waitForBinding} and {@link keepBeating}: wrap
 * the others in {@link retry}. Every call takes an AbortSignal.
 */
export class BotClient {
  /** The API's base URL, without a trailing slash. */
  readonly baseUrl: string;
  /** The slot's application uuid. */
  readonly appUuid: string;
  readonly #token: string;
  readonly #timeoutMs: number;
  readonly #fetch: typeof globalThis.fetch;
  #credential: string | undefined;
  #heartbeatIntervalMs: number | undefined;

  constructor(options: BotClientOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch {
      throw new BotClientConfigError(`the bot API URL ${JSON.stringify(options.baseUrl)} is not a URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new BotClientConfigError(`the bot API URL ${JSON.stringify(options.baseUrl)} is not http or https`);
    }
    if (!options.appUuid || !options.token) {
      throw new BotClientConfigError("the slot's application uuid and token must both be given");
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.appUuid = options.appUuid;
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * A client configured from the environment the operator gives every slot's container:
   * `BOTPOOL_API_URL`, `POOL_SLOT_UUID` and `BOTPOOL_SLOT_TOKEN`. Throws a
   * {@link BotClientConfigError} naming the ones missing. Ask {@link isPrePull} first.
   */
  static fromEnv(env: Env = process.env, options: Omit<BotClientOptions, "baseUrl" | "appUuid" | "token"> = {}): BotClient {
    const names = [ENV_API_URL, ENV_SLOT_UUID, ENV_SLOT_TOKEN];
    const missing = names.filter((n) => !env[n]);
    if (missing.length > 0) {
      throw new BotClientConfigError(`${names.join(", ")} must all be set; missing: ${missing.join(", ")}`, missing);
    }
    return new BotClient({
      ...options,
      baseUrl: env[ENV_API_URL] as string,
      appUuid: env[ENV_SLOT_UUID] as string,
      token: env[ENV_SLOT_TOKEN] as string,
    });
  }

  /**
   * Fetches the bound bot's configuration at once, without waiting. Rejects with a
   * {@link BotApiError}: 404 (`slotFree`) while no bot is bound, 410 (`gone`) once the bot is
   * finished, 409 (`conflict`) when the binding was handed out already (exit). Prefer
   * {@link waitForBinding}.
   */
  async config(options: CallOptions = {}): Promise<BotConfig> {
    const cfg = await this.#request<BotConfig>("GET", this.#configPath(), this.#token, undefined, options);
    this.#keep(cfg);
    return cfg;
  }

  /**
   * Asks for the bound bot's configuration until there is one, each request waiting up to
   * `waitMs` (the operator answers the moment a bot is bound, so a standby container learns its
   * bot at once). Transient failures (429, 502, 503, 504, no answer) are retried with a pause
   * growing from 200 ms to 5 s, at least the answer's Retry-After; a free slot's 404 is asked
   * again at once (after up to a second when the operator did not wait: one older than the
   * long-poll). Rejects with the {@link BotApiError} of an answer that will not change: 410
   * (`gone`: exit), 409 (`conflict`: the binding was handed out already, or a newer wait of this
   * slot took this one's place), 401, 403, 400. Rejects with the signal's reason when it aborts.
   * The Go client's `WaitForBinding`.
   */
  async waitForBinding(options: WaitOptions = {}): Promise<BotConfig> {
    let waitMs = options.waitMs ?? DEFAULT_WAIT_MS;
    if (!(waitMs > 0)) {
      waitMs = DEFAULT_WAIT_MS;
    }
    if (waitMs > MAX_WAIT_MS) {
      throw new RangeError(`waitMs ${waitMs} is more than the ${MAX_WAIT_MS} ms the operator accepts`);
    }
    const { signal } = options;
    const path = `${this.#configPath()}?wait=${encodeURIComponent(formatDuration(waitMs))}`;
    let backoff = FIRST_BACKOFF_MS;
    for (;;) {
      const start = performance.now();
      let pause = 0;
      try {
        const cfg = await this.#request<BotConfig>("GET", path, this.#token, undefined, {
          signal,
          timeoutMs: Math.max(this.#timeoutMs, waitMs + WAIT_SLACK_MS),
        });
        this.#keep(cfg);
        return cfg;
      } catch (err) {
        if (err instanceof BotApiError && err.slotFree) {
          backoff = FIRST_BACKOFF_MS;
          // An operator that does not wait answers at once: pause instead of asking in a loop.
          if (performance.now() - start < waitMs / 2) {
            pause = Math.min(waitMs, 1000);
          }
        } else if (isRetryable(err)) {
          pause = Math.max(backoff, retryAfterOf(err));
          backoff = Math.min(2 * backoff, MOST_BACKOFF_MS);
          options.onRetry?.(err, pause);
        } else {
          throw err;
        }
      }
      if (pause > 0) {
        await sleep(pause, signal);
      } else {
        signal?.throwIfAborted();
      }
    }
  }

  /** Proves the bot is alive and returns what it should do next: "continue", "leave" or "exit". */
  async heartbeat(bot: string, options: CallOptions = {}): Promise<HeartbeatResponse> {
    return this.#request<HeartbeatResponse>("POST", this.#botPath(bot, "heartbeat"), this.#botToken(), {}, options);
  }

  /**
   * Reports the bot's phase (repeats are harmless) and returns the phase the Bot has now. A move
   * backwards or out of Done/Fatal is refused with 409; an invalid report with 400.
   */
  async reportStatus(bot: string, report: StatusReport, options: CallOptions = {}): Promise<StatusResponse> {
    const body: Record<string, unknown> = { phase: report.phase };
    if (report.reason !== undefined) body["reason"] = report.reason;
    if (report.message !== undefined) body["message"] = report.message;
    if (report.recordingLocation !== undefined) body["recordingLocation"] = report.recordingLocation;
    if (report.speakerTimeframes !== undefined) {
      body["speakerTimeframes"] = report.speakerTimeframes.map((t: SpeakerTimeframe) => ({
        speaker: t.speaker,
        start: timeOf(t.start),
        end: timeOf(t.end),
      }));
    }
    return this.#request<StatusResponse>("POST", this.#botPath(bot, "status"), this.#botToken(), body, options);
  }

  /** Stores 1 to 100 events about the meeting; the answer says how many were accepted (202). */
  async sendEvents(bot: string, events: BotEvent[], options: CallOptions = {}): Promise<EventsResponse> {
    const body = {
      events: events.map((e) => {
        const out: Record<string, unknown> = { type: e.type };
        if (e.at !== undefined) out["at"] = timeOf(e.at);
        if (e.data !== undefined) out["data"] = e.data;
        return out;
      }),
    };
    return this.#request<EventsResponse>("POST", this.#botPath(bot, "events"), this.#botToken(), body, options);
  }

  /**
   * Sends heartbeats, the first at once, then one every `intervalMs` after the last answer,
   * until the operator says to leave or exit, or the signal aborts. Transient failures are
   * retried, pausing from 200 ms up to 5 s and at least the answer's Retry-After, for as long as
   * it takes (the operator decides when a silent bot is dead, and stops its container). A 401
   * means the binding ended: the loop resolves with action "exit" and reason "bindingEnded".
   * Any other error (403, 400…) rejects.
   *
   * Run it beside the meeting and act on its result:
   *
   * ```ts
   * const stop = new AbortController();
   * const beating = client.keepBeating(config.bot, { signal: stop.signal });
   * // ... when the meeting ends on its own: stop.abort(); await beating;
   * ```
   */
  async keepBeating(bot: string, options: KeepBeatingOptions = {}): Promise<BeatingResult> {
    const intervalMs = options.intervalMs ?? this.#heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_MS;
    if (!(intervalMs > 0)) {
      throw new RangeError(`intervalMs must be more than 0, got ${intervalMs}`);
    }
    const { signal } = options;
    let beats = 0;
    let last: HeartbeatResponse | undefined;
    const result = (action: BeatingResult["action"], reason: BeatingResult["reason"]): BeatingResult =>
      last === undefined ? { action, reason, beats } : { action, reason, beats, last };
    let backoff = FIRST_BACKOFF_MS;
    for (;;) {
      if (signal?.aborted) {
        return result("stopped", "stopped");
      }
      let pause: number;
      try {
        const answer = await this.heartbeat(bot, { signal });
        beats++;
        last = answer;
        backoff = FIRST_BACKOFF_MS;
        options.onHeartbeat?.(answer);
        if (answer.action === "leave" || answer.action === "exit") {
          return result(answer.action, answer.action);
        }
        pause = intervalMs;
      } catch (err) {
        if (signal?.aborted) {
          return result("stopped", "stopped"); // whatever its reason, the abort is what ended the call
        }
        if (err instanceof BotApiError && (err.unauthorized || err.gone)) {
          // 401: the binding ended; 410: the bot ended and its slot let go of it.
          return { ...result("exit", "bindingEnded"), error: err };
        }
        if (!isRetryable(err)) {
          throw err;
        }
        pause = Math.max(backoff, retryAfterOf(err));
        backoff = Math.min(2 * backoff, MOST_BACKOFF_MS);
        options.onRetry?.(err, pause);
      }
      try {
        await sleep(pause, signal);
      } catch (err) {
        if (signal?.aborted) {
          return result("stopped", "stopped");
        }
        throw err;
      }
    }
  }

  #configPath(): string {
    return `/v1/slots/${encodeURIComponent(this.appUuid)}/config`;
  }

  #botPath(bot: string, action: string): string {
    return `/v1/bots/${encodeURIComponent(bot)}/${action}`;
  }

  /** Remembers the credential and heartbeat interval of a configuration received. */
  #keep(cfg: BotConfig): void {
    if (cfg.credential) {
      this.#credential = cfg.credential;
    }
    try {
      const ms = parseDuration(cfg.heartbeatInterval);
      if (ms > 0) {
        this.#heartbeatIntervalMs = ms;
      }
    } catch {
      // keepBeating falls back to its default
    }
  }

  /** What the bot calls carry: the binding credential once there is one. */
  #botToken(): string {
    return this.#credential ?? this.#token;
  }

  async #request<T>(method: string, path: string, token: string, body: unknown, options: CallOptions): Promise<T> {
    const { signal } = options;
    signal?.throwIfAborted();
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const onAbort = (): void => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const headers: Record<string, string> = { Authorization: `Bearer ${token}`, Accept: "application/json" };
    let payload: string | null = null;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers["Content-Type"] = "application/json";
    }
    try {
      let res: Response;
      let text: string;
      try {
        res = await this.#fetch(this.baseUrl + path, { method, headers, body: payload, signal: controller.signal });
        text = await res.text();
      } catch (err) {
        if (signal?.aborted) {
          throw signal.reason;
        }
        if (timedOut) {
          throw new BotApiNetworkError(`${method} ${path}: no answer within ${timeoutMs} ms`, { method, path, timedOut: true });
        }
        throw new BotApiNetworkError(`${method} ${path}: ${describe(err)}`, { method, path, cause: err });
      }
      if (res.status < 200 || res.status > 299) {
        throw errorOf(res, text, method, path);
      }
      try {
        return JSON.parse(text) as T;
      } catch (err) {
        throw new Error(`${method} ${path}: the bot API answered ${res.status} with a body that is not JSON`, { cause: err });
      }
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

/** A time as the API takes it: RFC 3339. */
function timeOf(t: Date | string): string {
  return t instanceof Date ? t.toISOString() : t;
}

/** A fetch failure's message and that of its cause ("fetch failed: connect ECONNREFUSED …"). */
function describe(err: unknown): string {
  if (!(err instanceof Error)) {
    return String(err);
  }
  const cause = err.cause instanceof Error ? err.cause.message : undefined;
  return cause ? `${err.message}: ${cause}` : err.message;
}
