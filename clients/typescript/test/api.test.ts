// Every call of the client against the real bot API (the Go handlers, served by ../testserver).
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  Action,
  BotApiError,
  BotApiNetworkError,
  BotClient,
  Phase,
  isRetryable,
  parseDuration,
  retry,
  type BotConfig,
} from "@botpool/client";

import { startTestServer, waitFor, type Slot, type TestServer } from "./testserver.js";

let server: TestServer;

before(async () => {
  server = await startTestServer();
});

after(async () => {
  await server?.stop();
});

/** Asserts that p rejects with a BotApiError of the status, and returns it. */
async function rejectsWith(p: Promise<unknown>, status: number): Promise<BotApiError> {
  const err = await p.then(
    (v) => assert.fail(`resolved with ${JSON.stringify(v)}, want a ${status}`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof BotApiError, `want a BotApiError ${status}, got ${String(err)}`);
  assert.equal(err.status, status, err.message);
  return err;
}

/** A slot with a bot bound and claimed: its client holds the binding credential. */
async function claimed(options: { logLevel?: string } = {}): Promise<{ slot: Slot; bot: string; client: BotClient; config: BotConfig }> {
  const slot = await server.newSlot();
  const bot = await server.bind(slot, options);
  const client = server.client(slot);
  const config = await client.config();
  return { slot, bot, client, config };
}

const T = { timeout: 60_000 };

describe("config", () => {
  test("a free slot is 404 (slotFree), not retryable", T, async () => {
    const slot = await server.newSlot();
    const err = await rejectsWith(server.client(slot).config(), 404);
    assert.ok(err.slotFree);
    assert.equal(err.serverMessage, "no bot is bound to this slot yet");
    assert.match(err.body, /"error"/);
    assert.equal(isRetryable(err), false);
  });

  test("a bound slot's config: the bot, its meeting and the binding credential", T, async () => {
    const slot = await server.newSlot();
    const bot = await server.bind(slot);
    const config = await server.client(slot).config();
    assert.equal(config.bot, bot);
    assert.equal(config.namespace, "team-a");
    assert.equal(config.meetingUrl, "https://meet.google.com/abc-defg-hij");
    assert.equal(config.platform, "google-meet");
    assert.equal(config.recording, false);
    assert.equal(parseDuration(config.maxDuration), 3_600_000);
    assert.equal(parseDuration(config.heartbeatInterval), 100);
    assert.deepEqual(config.automaticLeave, {});
    assert.match(config.credential ?? "", /^bpb_/);
    assert.equal((await server.bot(bot)).claimed, true);
  });

  test("a wrong token is 401, another slot's application 403", T, async () => {
    const slot = await server.newSlot();
    const other = await server.newSlot();
    const wrong = await rejectsWith(server.client({ ...slot, token: "bpt_not-a-token" }).config(), 401);
    assert.ok(wrong.unauthorized);
    assert.equal(wrong.serverMessage, "invalid token");
    const forbidden = await rejectsWith(server.client({ ...slot, appUuid: other.appUuid }).config(), 403);
    assert.ok(forbidden.forbidden);
    assert.equal(isRetryable(forbidden), false);
  });

  test("a binding is handed out once: a second config call is 409 (conflict)", T, async () => {
    const { slot } = await claimed();
    const err = await rejectsWith(server.client(slot).config(), 409);
    assert.ok(err.conflict);
    assert.match(err.serverMessage, /handed out once/);
    // waitForBinding does not retry it either: the container exits.
    await rejectsWith(server.client(slot).waitForBinding({ waitMs: 5000 }), 409);
  });

  test("a finished bot's config is 410 (gone), which ends waitForBinding", T, async () => {
    const slot = await server.newSlot();
    const bot = await server.bind(slot);
    await server.control("POST", "/finish-bot", { bot });
    const err = await rejectsWith(server.client(slot).config(), 410);
    assert.ok(err.gone);
    assert.match(err.serverMessage, /is Done: exit/);
    await rejectsWith(server.client(slot).waitForBinding({ waitMs: 5000 }), 410);
  });
});

describe("waitForBinding (long-poll)", () => {
  test("answers the moment a bot is bound, from one waiting request", T, async () => {
    const slot = await server.newSlot();
    const client = server.client(slot);
    const waiting = client.waitForBinding({ waitMs: 30_000 });
    await waitFor("the config request to wait", async () =>
      (await server.configRequests(slot)).some((r) => r.query === "wait=30s" && r.status === 0),
    );
    const bot = await server.bind(slot);
    const config = await waiting;
    assert.equal(config.bot, bot);
    assert.match(config.credential ?? "", /^bpb_/);
    assert.deepEqual(
      (await server.configRequests(slot)).map((r) => [r.query, r.status]),
      [["wait=30s", 200]],
    );
    // The client keeps the credential: the bot calls work.
    assert.equal((await client.heartbeat(bot)).action, Action.Continue);
  });

  test("asks again when a wait ends without a binding", T, async () => {
    const slot = await server.newSlot();
    const waiting = server.client(slot).waitForBinding({ waitMs: 1000 });
    await waitFor("a wait to end with 404 and the next to begin", async () => {
      const reqs = await server.configRequests(slot);
      return reqs.some((r) => r.status === 404) && reqs.some((r) => r.status === 0);
    });
    const bot = await server.bind(slot);
    assert.equal((await waiting).bot, bot);
    for (const r of await server.configRequests(slot)) {
      assert.equal(r.query, "wait=1s");
    }
  });

  test("a newer wait of the slot takes the place of the older, which gets 409", T, async () => {
    const slot = await server.newSlot();
    const older = server.client(slot).waitForBinding({ waitMs: 30_000 });
    const olderErr = older.then(
      () => undefined,
      (e: unknown) => e,
    );
    await waitFor("the first wait", async () => (await server.configRequests(slot)).some((r) => r.status === 0));
    const newer = server.client(slot).waitForBinding({ waitMs: 30_000 });
    const err = await olderErr;
    assert.ok(err instanceof BotApiError && err.conflict, String(err));
    assert.match(err.serverMessage, /newer config request/);
    const bot = await server.bind(slot);
    assert.equal((await newer).bot, bot);
  });

  test("a slot whose token is replaced while its container waits gets 410", T, async () => {
    const slot = await server.newSlot();
    // Handled from the start: the 410 may come before the control call's own answer.
    const refused = rejectsWith(server.client(slot).waitForBinding({ waitMs: 30_000 }), 410);
    await waitFor("the wait", async () => (await server.configRequests(slot)).some((r) => r.status === 0));
    await server.control("POST", "/replace-token", { slot: slot.slot });
    const err = await refused;
    assert.ok(err.gone);
  });

  test("aborting rejects with the signal's reason, which is not retried", T, async () => {
    const slot = await server.newSlot();
    const ac = new AbortController();
    const waiting = server.client(slot)
      .waitForBinding({ waitMs: 30_000, signal: ac.signal })
      .then(
        () => assert.fail("resolved"),
        (e: unknown) => e,
      );
    await waitFor("the wait", async () => (await server.configRequests(slot)).some((r) => r.status === 0));
    ac.abort();
    const err = await waiting;
    assert.equal((err as Error).name, "AbortError");
    assert.equal(isRetryable(err), false);
    // A signal aborted already: no request at all.
    await assert.rejects(server.client(slot).waitForBinding({ signal: AbortSignal.abort() }), { name: "AbortError" });
  });

  test("a wait longer than the operator accepts is refused before any request", async () => {
    const slot = await server.newSlot();
    await assert.rejects(server.client(slot).waitForBinding({ waitMs: 61_000 }), RangeError);
  });
});

describe("bot calls", () => {
  test("heartbeat: continue, with the Bot's log level", T, async () => {
    const { bot, client } = await claimed({ logLevel: "debug" });
    const hb = await client.heartbeat(bot);
    assert.deepEqual(hb, { action: "continue", logLevel: "debug" });
    assert.equal((await server.bot(bot)).heartbeats, true);
  });

  test("status: phases move forward, repeats are harmless, backwards is 409, an operator's reason 400", T, async () => {
    const { bot, client } = await claimed();
    assert.deepEqual(await client.reportStatus(bot, { phase: Phase.JoiningCall }), { phase: "JoiningCall" });
    assert.deepEqual(await client.reportStatus(bot, { phase: Phase.InCall }), { phase: "InCall" });
    assert.deepEqual(await client.reportStatus(bot, { phase: Phase.InCall }), { phase: "InCall" });
    const back = await rejectsWith(client.reportStatus(bot, { phase: Phase.JoiningCall }), 409);
    assert.ok(back.conflict);
    assert.equal(back.serverMessage, "cannot go back from InCall to JoiningCall");
    const reason = await rejectsWith(client.reportStatus(bot, { phase: Phase.Fatal, reason: "HeartbeatTimeout" }), 400);
    assert.match(reason.serverMessage, /operator's to give/);
    const view = await server.bot(bot);
    assert.equal(view.phase, "InCall");
    assert.equal(view.started, true);
  });

  test("status: Done with a recording and speaker timeframes", T, async () => {
    const { bot, client } = await claimed();
    await client.reportStatus(bot, { phase: Phase.CallEnded });
    const start = new Date(Date.now() - 60_000);
    const res = await client.reportStatus(bot, {
      phase: Phase.Done,
      recordingLocation: "s3://recordings/standup.mp4",
      speakerTimeframes: [{ speaker: "Ann", start, end: new Date(start.getTime() + 5000) }],
    });
    assert.deepEqual(res, { phase: "Done" });
    const view = await server.bot(bot);
    assert.equal(view.phase, "Done");
    assert.equal(view.recordingLocation, "s3://recordings/standup.mp4");
    const frames = view.events.find((e) => e.type === "speakerTimeframes");
    assert.deepEqual((frames?.data as { speaker: string }[])[0]?.speaker, "Ann");
    // Done is final.
    await rejectsWith(client.reportStatus(bot, { phase: Phase.InCall }), 409);
  });

  test("status: Fatal with the bot's own reason", T, async () => {
    const { bot, client } = await claimed();
    await client.reportStatus(bot, { phase: Phase.Fatal, reason: "WaitingRoomTimeout", message: "nobody admitted the bot" });
    const view = await server.bot(bot);
    assert.equal(view.phase, "Fatal");
    assert.equal(view.reason, "WaitingRoomTimeout");
    assert.equal(view.message, "nobody admitted the bot");
  });

  test("events: accepted (202), stored with their data and time; an invalid one is 400", T, async () => {
    const { bot, client } = await claimed();
    const at = new Date(Date.now() - 1000);
    const res = await client.sendEvents(bot, [
      { type: "participant.joined", at, data: { name: "Ann" } },
      { type: "log", data: "joined" },
    ]);
    assert.deepEqual(res, { accepted: 2 });
    const events = (await server.bot(bot)).events;
    const joined = events.find((e) => e.type === "participant.joined");
    assert.deepEqual(joined?.data, { name: "Ann" });
    assert.equal(new Date(joined?.at ?? 0).getTime(), at.getTime());
    assert.ok(events.some((e) => e.type === "log" && e.data === "joined"));
    const bad = await rejectsWith(client.sendEvents(bot, [{ type: "not a type" }]), 400);
    assert.match(bad.serverMessage, /events\[0\]\.type/);
    await rejectsWith(client.sendEvents(bot, []), 400);
  });

  test("a credential authorizes its own bot only: 403 on another bot's routes", T, async () => {
    const a = await claimed();
    const b = await claimed();
    const err = await rejectsWith(a.client.heartbeat(b.bot), 403);
    assert.ok(err.forbidden);
    await rejectsWith(a.client.reportStatus(b.bot, { phase: Phase.InCall }), 403);
    await rejectsWith(a.client.sendEvents(b.bot, [{ type: "log" }]), 403);
  });

  test("before a config, the bot calls carry the slot token, which is refused (401)", T, async () => {
    const slot = await server.newSlot();
    const bot = await server.bind(slot);
    const err = await rejectsWith(server.client(slot).heartbeat(bot), 401);
    assert.match(err.serverMessage, /send the binding credential/);
  });

  test("once the binding ends, the credential is refused (401)", T, async () => {
    const { slot, bot, client } = await claimed();
    await server.control("POST", "/release", { slot: slot.slot });
    const err = await rejectsWith(client.heartbeat(bot), 401);
    assert.match(err.serverMessage, /binding of this credential has ended/);
  });
});

describe("keepBeating", () => {
  test("beats at the configured interval until a heartbeat answers leave (the Bot is deleted)", T, async () => {
    const { bot, client } = await claimed();
    let beats = 0;
    const beating = client.keepBeating(bot, { onHeartbeat: () => beats++ });
    await waitFor("two heartbeats", () => beats >= 2);
    await server.control("POST", "/delete-bot", { bot });
    const end = await beating;
    assert.equal(end.action, "leave");
    assert.equal(end.reason, "leave");
    assert.equal(end.last?.action, "leave");
    assert.ok(end.beats >= 3);
  });

  test("resolves exit when the operator ended the bot", T, async () => {
    const { bot, client } = await claimed();
    await server.control("POST", "/finish-bot", { bot, phase: "Fatal" });
    const end = await client.keepBeating(bot);
    assert.deepEqual([end.action, end.reason], ["exit", "exit"]);
  });

  test("resolves exit (bindingEnded) when the credential is refused", T, async () => {
    const { slot, bot, client } = await claimed();
    let beats = 0;
    const beating = client.keepBeating(bot, { onHeartbeat: () => beats++ });
    await waitFor("a heartbeat", () => beats >= 1);
    await server.control("POST", "/release", { slot: slot.slot });
    const end = await beating;
    assert.deepEqual([end.action, end.reason], ["exit", "bindingEnded"]);
    assert.equal(end.error?.status, 401);
  });

  test("resolves exit (bindingEnded) when the bot ended and its slot let go of it (410)", T, async () => {
    const { slot, bot, client } = await claimed();
    await server.control("POST", "/finish-bot", { bot, phase: "Done" });
    await server.control("POST", "/release", { slot: slot.slot });
    const end = await client.keepBeating(bot);
    assert.deepEqual([end.action, end.reason], ["exit", "bindingEnded"]);
    assert.equal(end.error?.status, 410);
  });

  test("stops with its signal", T, async () => {
    const { bot, client } = await claimed();
    const stop = new AbortController();
    let beats = 0;
    const beating = client.keepBeating(bot, { signal: stop.signal, onHeartbeat: () => beats++ });
    await waitFor("a heartbeat", () => beats >= 1);
    stop.abort("the meeting ended");
    const end = await beating;
    assert.deepEqual([end.action, end.reason], ["stopped", "stopped"]);
  });

  test("retries a 503 with Retry-After (the store refused the beat) and goes on", T, async () => {
    const { bot, client } = await claimed();
    await server.control("POST", "/fail-heartbeats", { count: 1 });
    const retried: unknown[] = [];
    let beats = 0;
    const stop = new AbortController();
    const beating = client.keepBeating(bot, {
      signal: stop.signal,
      onHeartbeat: () => beats++,
      onRetry: (err, delayMs) => retried.push([err instanceof BotApiError ? err.status : String(err), delayMs]),
    });
    await waitFor("a heartbeat after the refused one", () => beats >= 1);
    stop.abort();
    await beating;
    assert.deepEqual(retried, [[503, 1000]]);
    assert.deepEqual(
      (await server.botRequests(bot, "heartbeat")).slice(0, 2).map((r) => r.status),
      [503, 200],
    );
  });
});

describe("retries", () => {
  test("retry honours a 503's Retry-After and succeeds", T, async () => {
    const { bot, client } = await claimed();
    await server.control("POST", "/fail-heartbeats", { count: 1 });
    const first = await rejectsWith(client.heartbeat(bot), 503);
    assert.equal(first.retryAfterMs, 1000);
    assert.equal(first.serverMessage, "the operator could not record this heartbeat; send it again");
    assert.equal(isRetryable(first), true);

    await server.control("POST", "/fail-heartbeats", { count: 1 });
    const delays: number[] = [];
    const hb = await retry(() => client.heartbeat(bot), { onRetry: (_err, _attempt, ms) => delays.push(ms) });
    assert.equal(hb.action, "continue");
    assert.deepEqual(delays, [1000]);
  });

  test("a 429 of the event quota carries Retry-After; retry waits for it and succeeds", T, async () => {
    const { bot, client } = await claimed();
    const hundred = Array.from({ length: 100 }, (_, i) => ({ type: "log", data: i }));
    assert.deepEqual(await client.sendEvents(bot, hundred), { accepted: 100 });
    const refused = await rejectsWith(client.sendEvents(bot, [{ type: "log" }]), 429);
    assert.ok(refused.rateLimited);
    assert.equal(refused.retryAfterMs, 1000);
    assert.match(refused.serverMessage, /event quota of this bot spent/);
    assert.equal(isRetryable(refused), true);

    // The quota's clock moves when the test says so: once retry has met the 429.
    let advanced: Promise<unknown> | undefined;
    const res = await retry(() => client.sendEvents(bot, [{ type: "log" }]), {
      onRetry: (err) => {
        assert.ok(err instanceof BotApiError && err.status === 429);
        advanced ??= server.control("POST", "/advance-quota-clock", { seconds: 2 });
      },
    });
    await advanced;
    assert.deepEqual(res, { accepted: 1 });
    const statuses = (await server.botRequests(bot, "events")).map((r) => r.status);
    assert.deepEqual(statuses.slice(0, 3), [202, 429, 429]);
    assert.equal(statuses.at(-1), 202);
  });

  test("no answer (connection refused) is a retryable BotApiNetworkError", T, async () => {
    // A port nobody listens on: one the OS gave a listener that is closed again.
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const client = new BotClient({ baseUrl: `http://127.0.0.1:${port}`, appUuid: "app", token: "bpt_x" });
    let calls = 0;
    const err = await retry(
      () => {
        calls++;
        return client.config();
      },
      { attempts: 3, firstDelayMs: 1 },
    ).then(
      () => assert.fail("resolved"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof BotApiNetworkError, String(err));
    assert.equal(err.timedOut, false);
    assert.match(err.message, /ECONNREFUSED/);
    assert.equal(isRetryable(err), true);
    assert.equal(calls, 3);
  });

  test("no answer in time is a retryable BotApiNetworkError (timedOut)", T, async () => {
    // A server that accepts connections and never answers.
    const sockets: Socket[] = [];
    const silent: Server = createServer((s) => sockets.push(s));
    const port = await new Promise<number>((resolve) =>
      silent.listen(0, "127.0.0.1", () => resolve((silent.address() as { port: number }).port)),
    );
    try {
      const client = new BotClient({ baseUrl: `http://127.0.0.1:${port}`, appUuid: "app", token: "bpt_x", timeoutMs: 200 });
      const err = await client.config().then(
        () => assert.fail("resolved"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof BotApiNetworkError, String(err));
      assert.equal(err.timedOut, true);
      assert.equal(isRetryable(err), true);
      // The caller's own signal is not a timeout of the client's: not retryable.
      const aborted = await client.config({ signal: AbortSignal.timeout(100), timeoutMs: 60_000 }).then(
        () => assert.fail("resolved"),
        (e: unknown) => e,
      );
      assert.equal((aborted as Error).name, "TimeoutError");
      assert.equal(isRetryable(aborted), false);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});
