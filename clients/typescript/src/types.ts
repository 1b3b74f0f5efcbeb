// The bot API's requests and answers, as JSON on the wire. They mirror the Go types of
// botapi/botclient (types.go); docs/botapi.md is the contract.

/** A Go duration string, as the API writes durations: "10s", "1h0m0s", "500ms". See {@link parseDuration}. */
export type GoDuration = string;

/** The meeting platforms the operator knows. */
export type Platform = "google-meet" | "microsoft-teams" | "zoom";

/** What `GET /v1/slots/{appUUID}/config` answers: the bound bot and its meeting. */
export interface BotConfig {
  /** The name of the Bot object; every other call names it. */
  bot: string;
  namespace: string;
  meetingUrl: string;
  /** The meeting's platform (see {@link Platform}); a string, so that a newer operator's platform still parses. */
  platform: Platform | (string & {});
  /** The name to show in the meeting; absent: the bot image's default. */
  displayName?: string;
  recording: boolean;
  /** How long the bot may stay in the meeting; past it a heartbeat answers "leave". */
  maxDuration: GoDuration;
  automaticLeave: AutomaticLeave;
  /** How often the operator expects a heartbeat. */
  heartbeatInterval: GoDuration;
  /**
   * The binding credential: it authorizes the heartbeats, status reports and events of this bot,
   * and of no other, while its binding lasts. Handed out once (a later config call for the same
   * binding is refused with 409). The client keeps it and sends it with every bot call.
   */
  credential?: string;
  /**
   * The Bot's `spec.parameters` over its pool's `parameterDefaults` (top-level keys, the Bot's
   * win), exactly as written; absent when neither has any. `unknown`: check its shape with
   * {@link decodeParameters} before use.
   */
  parameters?: unknown;
  /**
   * The values of the Bot's `spec.secretParameters`, by name. In this answer alone: keep them
   * in memory, never log or report them.
   */
  secretParameters?: Record<string, string>;
}

/** The timeouts after which a bot leaves on its own; an absent one is not set. */
export interface AutomaticLeave {
  waitingRoomTimeout?: GoDuration;
  noOneJoinedTimeout?: GoDuration;
  everyoneLeftTimeout?: GoDuration;
  inactivityTimeout?: GoDuration;
}

/** The operator's answer to a heartbeat. */
export const Action = {
  /** Carry on. */
  Continue: "continue",
  /** Leave the meeting gracefully, report CallEnded and Done, then exit. */
  Leave: "leave",
  /** Stop now: this container no longer serves this bot. */
  Exit: "exit",
} as const;
export type HeartbeatAction = (typeof Action)[keyof typeof Action];

/** The log level a Bot's `botpool.dev/log-level` annotation asks for. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** What `POST /v1/bots/{name}/heartbeat` answers. */
export interface HeartbeatResponse {
  action: HeartbeatAction;
  logLevel: LogLevel;
  /**
   * True when the operator could not store this beat now (its database is down or refuses
   * writes): the beat waits in the operator's memory and nobody is failed for missing
   * heartbeats until it is written. Nothing to do but keep beating.
   */
  buffered?: boolean;
}

/** The phases a bot reports about itself, in lifecycle order (Fatal from any phase that is not terminal). */
export const Phase = {
  JoiningCall: "JoiningCall",
  InWaitingRoom: "InWaitingRoom",
  InCall: "InCall",
  Leaving: "Leaving",
  CallEnded: "CallEnded",
  Done: "Done",
  Fatal: "Fatal",
} as const;
export type BotPhase = (typeof Phase)[keyof typeof Phase];

/** The body of `POST /v1/bots/{name}/status`. */
export interface StatusReport {
  phase: BotPhase;
  /** A CamelCase word, mostly with Fatal ("WaitingRoomTimeout", "Kicked"); the operator's own reasons are refused (400). */
  reason?: string;
  message?: string;
  /** Where the recording was stored, reported with Done. */
  recordingLocation?: string;
  /** Who spoke when, reported with CallEnded or Done; kept as a bot event. */
  speakerTimeframes?: SpeakerTimeframe[];
}

/** Who spoke when. Strings are sent as they are and must be RFC 3339 times. */
export interface SpeakerTimeframe {
  speaker: string;
  start: Date | string;
  end: Date | string;
}

/** The answer to a status report: the phase the Bot has now. */
export interface StatusResponse {
  phase: BotPhase;
}

/** One thing a bot reports about its meeting (a participant joined, a log line…). */
export interface BotEvent {
  /** 1 to 64 letters, digits and `_.:-`, starting with a letter or digit. */
  type: string;
  /** When it happened; absent, or too far from the operator's clock, the operator's time is used. */
  at?: Date | string;
  /** Any JSON value up to 16 KiB. */
  data?: unknown;
}

/** The body of `POST /v1/bots/{name}/events`. */
export interface EventsRequest {
  events: BotEvent[];
}

/** The answer to an events request: how many were accepted. */
export interface EventsResponse {
  accepted: number;
}

/** The body of every 4xx and 5xx answer. */
export interface ErrorResponse {
  error: string;
}

/**
 * The bot's parameters as the image's own type: `check` validates the value (a type guard, or
 * a schema library's parse wrapped in one) and throws nothing; a value it refuses throws a
 * TypeError naming what was wrong. Absent parameters decode as `fallback`.
 */
export function decodeParameters<T>(cfg: BotConfig, check: (v: unknown) => v is T, fallback: T): T {
  if (cfg.parameters === undefined || cfg.parameters === null) {
    return fallback;
  }
  if (!check(cfg.parameters)) {
    throw new TypeError(`bot ${cfg.bot}: its parameters do not have the shape this image expects`);
  }
  return cfg.parameters;
}
