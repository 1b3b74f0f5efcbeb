// The README's bot skeleton (examples/bot.ts) against the real bot API, with a meeting that is
// played by the test.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import type { BotConfig } from "@botpool/client";

import { MeetingError, runBot, type Meeting, type Outcome } from "../examples/bot.js";
import { packageDir, startTestServer, waitFor, type Slot, type TestServer } from "./testserver.js";

let server: TestServer;

before(async () => {
  server = await startTestServer();
});

after(async () => {
  await server?.stop();
});

/** A meeting the test plays: join (through a waiting room, or failing), end it, see the bot leave. */
class FakeMeeting implements Meeting {
  readonly log: string[] = [];
  #end: (() => void) | undefined;

  constructor(private readonly options: { waitingRoom?: boolean; failJoin?: Error } = {}) {}

  async join(config: BotConfig, inWaitingRoom: () => Promise<void>, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    this.log.push(`join ${config.meetingUrl}`);
    if (this.options.waitingRoom) {
      await inWaitingRoom();
      this.log.push("admitted");
    }
    if (this.options.failJoin) {
      throw this.options.failJoin;
    }
  }

  ended(signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#end = resolve;
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  }

  /** Ends the meeting, once the bot waits for its end. */
  end(): void {
    assert.ok(this.#end, "the bot does not wait for the meeting's end");
    this.#end();
  }

  get waitingForEnd(): boolean {
    return this.#end !== undefined;
  }

  async leave(): Promise<string | undefined> {
    this.log.push("leave");
    return "s3://recordings/standup.mp4";
  }
}

/** Starts the skeleton in a fresh slot's container and binds a bot to it. */
async function start(meeting: Meeting): Promise<{ slot: Slot; bot: string; run: Promise<Outcome> }> {
  const slot = await server.newSlot();
  const run = runBot(server.client(slot), meeting);
  await waitFor("the container to wait for a binding", async () => (await server.configRequests(slot)).some((r) => r.status === 0));
  const bot = await server.bind(slot);
  return { slot, bot, run };
}

const T = { timeout: 60_000 };

describe("the bot skeleton", () => {
  test("the README shows examples/bot.ts as it is", () => {
    const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
    const example = readFileSync(path.join(packageDir, "examples", "bot.ts"), "utf8");
    assert.ok(readme.includes("```ts\n" + example + "```\n"), "README.md's skeleton differs from examples/bot.ts: copy it over");
  });

  test("a meeting that ends on its own: InCall, heartbeats, then CallEnded and Done with the recording", T, async () => {
    const meeting = new FakeMeeting();
    const { bot, run } = await start(meeting);
    await waitFor("the bot in the call, beating", async () => {
      const v = await server.bot(bot);
      return v.phase === "InCall" && v.heartbeats && meeting.waitingForEnd;
    });
    meeting.end();
    assert.equal(await run, "done");
    const view = await server.bot(bot);
    assert.equal(view.phase, "Done");
    assert.equal(view.recordingLocation, "s3://recordings/standup.mp4");
    assert.deepEqual(meeting.log, ["join https://meet.google.com/abc-defg-hij", "leave"]);
    const reports = await server.botRequests(bot, "status");
    assert.deepEqual(
      reports.map((r) => r.status),
      [200, 200, 200, 200], // JoiningCall, InCall, CallEnded, Done
    );
  });

  test("through a waiting room; a heartbeat's leave (the Bot deleted) ends it Done", T, async () => {
    const meeting = new FakeMeeting({ waitingRoom: true });
    const { bot, run } = await start(meeting);
    await waitFor("the bot in the call", async () => (await server.bot(bot)).phase === "InCall");
    await server.control("POST", "/delete-bot", { bot });
    assert.equal(await run, "done");
    const view = await server.bot(bot);
    assert.equal(view.phase, "Done");
    assert.equal(view.deleting, true);
    assert.deepEqual(meeting.log, ["join https://meet.google.com/abc-defg-hij", "admitted", "leave"]);
    // JoiningCall, InWaitingRoom, InCall, Leaving, CallEnded, Done
    assert.equal((await server.botRequests(bot, "status")).filter((r) => r.status === 200).length, 6);
  });

  test("a heartbeat's exit stops the bot at once, reporting nothing more", T, async () => {
    const meeting = new FakeMeeting();
    const { bot, run } = await start(meeting);
    await waitFor("the bot in the call", async () => (await server.bot(bot)).phase === "InCall");
    await server.control("POST", "/finish-bot", { bot, phase: "Fatal" });
    assert.equal(await run, "exited");
    assert.equal((await server.bot(bot)).phase, "Fatal");
    assert.deepEqual(meeting.log, ["join https://meet.google.com/abc-defg-hij", "leave"]);
    assert.equal((await server.botRequests(bot, "status")).length, 2); // JoiningCall, InCall
  });

  test("a failed join is reported Fatal with the bot's reason", T, async () => {
    const meeting = new FakeMeeting({ waitingRoom: true, failJoin: new MeetingError("WaitingRoomTimeout", "nobody admitted the bot") });
    const { bot, run } = await start(meeting);
    assert.equal(await run, "fatal");
    const view = await server.bot(bot);
    assert.equal(view.phase, "Fatal");
    assert.equal(view.reason, "WaitingRoomTimeout");
    assert.equal(view.message, "nobody admitted the bot");
  });

  test("a bot finished before its container asked exits at once (410)", T, async () => {
    const slot = await server.newSlot();
    const bot = await server.bind(slot);
    await server.control("POST", "/finish-bot", { bot });
    const meeting = new FakeMeeting();
    assert.equal(await runBot(server.client(slot), meeting), "exited");
    assert.deepEqual(meeting.log, []);
  });

  test("a shutdown while waiting exits", T, async () => {
    const slot = await server.newSlot();
    const shutdown = new AbortController();
    const run = runBot(server.client(slot), new FakeMeeting(), shutdown.signal);
    await waitFor("the wait", async () => (await server.configRequests(slot)).some((r) => r.status === 0));
    shutdown.abort();
    assert.equal(await run, "exited");
  });
});
