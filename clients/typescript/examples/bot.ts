// bot.ts: a meeting bot's main on @botpool/client. It waits for a binding, joins the meeting,
// reports its phases, beats, leaves when the operator says so, and ends Done (or Fatal).
// Replace YourMeeting with your browser automation (Playwright, Puppeteer…).
import { pathToFileURL } from "node:url";

import { BotApiError, BotClient, Phase, decodeParameters, isPrePull, retry, type BotConfig, type StatusReport } from "@botpool/client";

/** The meeting side of the bot: your browser automation. */
export interface Meeting {
  /**
   * Opens config.meetingUrl and joins as config.displayName, calling inWaitingRoom() if the bot
   * is parked in a waiting room; resolves once the bot is in the call. Gives up (rejects) when
   * signal aborts. Enforces config.automaticLeave (parseDuration reads its timeouts).
   */
  join(config: BotConfig, inWaitingRoom: () => Promise<void>, signal: AbortSignal): Promise<void>;
  /** Resolves when the meeting is over for the bot (everyone left, the host ended it); rejects when signal aborts. */
  ended(signal: AbortSignal): Promise<void>;
  /** Leaves the meeting and closes the browser (safe to call twice); returns where the recording is, if anywhere. */
  leave(): Promise<string | undefined>;
}

/**
 * What this image reads of its Bot's parameters (spec.parameters over the pool's
 * parameterDefaults): the transcription provider its customer chose, and the key the
 * customer's namespace holds for it (spec.secretParameters, name "transcriptionKey"). The key
 * lives in memory only: never log it or put it in a report.
 */
export interface Transcription {
  provider: string;
  language?: string;
  apiKey?: string;
}

const hasTranscription = (v: unknown): v is { transcription?: { provider: string; language?: string } } => {
  if (typeof v !== "object" || v === null) return false;
  const t = (v as { transcription?: unknown }).transcription;
  return t === undefined || (typeof t === "object" && t !== null && typeof (t as { provider?: unknown }).provider === "string");
};

/** The transcription settings of a configuration, or undefined when its Bot asked for none. */
export function transcriptionOf(config: BotConfig): Transcription | undefined {
  const t = decodeParameters(config, hasTranscription, {}).transcription;
  const apiKey = config.secretParameters?.["transcriptionKey"];
  return t && (apiKey === undefined ? { ...t } : { ...t, apiKey });
}

/** A failure the bot reports as Fatal, with its own reason: a CamelCase word ("WaitingRoomTimeout", "Kicked"). */
export class MeetingError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

/** How a run ended: "done" (reported Done), "exited" (told to stop: nothing more to report), "fatal" (reported Fatal). */
export type Outcome = "done" | "exited" | "fatal";

export async function runBot(client: BotClient, meeting: Meeting, shutdown?: AbortSignal): Promise<Outcome> {
  // 1. A standby container waits here, for as long as it takes, until a bot is bound to its slot.
  let config: BotConfig;
  try {
    config = await client.waitForBinding({ signal: shutdown });
  } catch (err) {
    // 410: the bot is finished or gone; 409: this binding was handed out already. Exit.
    if ((err instanceof BotApiError && (err.gone || err.conflict)) || shutdown?.aborted) {
      return "exited";
    }
    throw err; // 401, 403: this container's configuration is wrong
  }
  const bot = config.bot;
  const report = (r: StatusReport) => retry(() => client.reportStatus(bot, r), { signal: shutdown });

  // 2. Heartbeats from now to the end. Their answer can end the meeting early: "leave" (the Bot
  // was deleted, or ran past maxDuration) or "exit" (stop now; also once the binding ended).
  const stopBeating = new AbortController();
  const beating = client.keepBeating(bot, { signal: stopBeating.signal });
  const told = new AbortController(); // aborted with "leave", "exit", or the heartbeats' failure
  beating.then(
    (end) => told.abort(end.action),
    (err: unknown) => told.abort(err),
  );
  const onShutdown = (): void => told.abort("exit"); // the container is being stopped
  shutdown?.addEventListener("abort", onShutdown, { once: true });

  try {
    // 3. Join, then stay until the meeting ends or the operator speaks.
    await report({ phase: Phase.JoiningCall });
    try {
      const inWaitingRoom = async (): Promise<void> => {
        await report({ phase: Phase.InWaitingRoom });
      };
      await meeting.join(config, inWaitingRoom, told.signal);
      await report({ phase: Phase.InCall });
      await meeting.ended(told.signal);
    } catch (err) {
      if (!told.signal.aborted) {
        throw err;
      }
    }
    const why: unknown = told.signal.aborted ? told.signal.reason : "ended";
    if (why instanceof Error) {
      throw why; // the heartbeats failed for good
    }
    if (why === "exit") {
      await meeting.leave();
      return "exited"; // stop now, report nothing more
    }
    if (why === "leave") {
      await report({ phase: Phase.Leaving });
    }
    // 4. Leave and end Done.
    const recordingLocation = await meeting.leave();
    await report({ phase: Phase.CallEnded });
    await report({ phase: Phase.Done, ...(recordingLocation === undefined ? {} : { recordingLocation }) });
    return "done";
  } catch (err) {
    await meeting.leave().catch(() => undefined);
    if ((err instanceof BotApiError && (err.unauthorized || err.gone)) || shutdown?.aborted) {
      return "exited"; // the binding ended, the bot is gone, or the container stops: nothing more to report
    }
    // 5. Anything else ends the bot Fatal, with a reason of its own.
    const reason = err instanceof MeetingError ? err.reason : "BotError";
    const message = String(err instanceof Error ? err.message : err).slice(0, 250);
    await report({ phase: Phase.Fatal, reason, message }).catch(() => undefined);
    return "fatal";
  } finally {
    stopBeating.abort();
    await beating.catch(() => undefined);
    shutdown?.removeEventListener("abort", onShutdown);
  }
}

/** Your browser automation goes here. */
class YourMeeting implements Meeting {
  async join(config: BotConfig, _inWaitingRoom: () => Promise<void>, _signal: AbortSignal): Promise<void> {
    throw new MeetingError("NotImplemented", `joining ${config.platform} meetings is not written yet`);
  }
  async ended(_signal: AbortSignal): Promise<void> {}
  async leave(): Promise<string | undefined> {
    return undefined;
  }
}

async function main(): Promise<void> {
  if (isPrePull()) {
    return; // a pool's image pre-pull: nothing to do, exit 0 at once
  }
  const client = BotClient.fromEnv(); // BOTPOOL_API_URL, POOL_SLOT_UUID, BOTPOOL_SLOT_TOKEN
  const shutdown = new AbortController();
  process.once("SIGTERM", () => shutdown.abort()); // the operator stops the container
  const outcome = await runBot(client, new YourMeeting(), shutdown.signal);
  console.log(`bot ${outcome}`); // exit 0 either way: the operator knows how the bot ended
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
