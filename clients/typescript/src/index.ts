// @botpool/client: the bot API's client for meeting-bot containers (docs/botapi.md).
export {
  BotClient,
  isPrePull,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_WAIT_MS,
  ENV_API_URL,
  ENV_SLOT_TOKEN,
  ENV_SLOT_UUID,
  MAX_WAIT_MS,
  PREPULL_ENV,
} from "./client.js";
export type { BeatingResult, BotClientOptions, CallOptions, Env, KeepBeatingOptions, WaitOptions } from "./client.js";
export { BotApiError, BotApiNetworkError, BotClientConfigError, parseRetryAfter } from "./errors.js";
export { isAbortError, isRetryable, retry, retryAfterOf, sleep } from "./retry.js";
export type { RetryOptions } from "./retry.js";
export { formatDuration, parseDuration } from "./duration.js";
export { Action, Phase, decodeParameters } from "./types.js";
export type {
  AutomaticLeave,
  BotConfig,
  BotEvent,
  BotPhase,
  ErrorResponse,
  EventsRequest,
  EventsResponse,
  GoDuration,
  HeartbeatAction,
  HeartbeatResponse,
  LogLevel,
  Platform,
  SpeakerTimeframe,
  StatusReport,
  StatusResponse,
} from "./types.js";
