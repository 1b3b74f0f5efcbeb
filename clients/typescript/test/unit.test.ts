// The parts of the client that need no server: the retry rule, retry, durations, the environment,
// and the package's shape.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";

import {
  BotApiError,
  BotApiNetworkError,
  BotClient,
  BotClientConfigError,
  formatDuration,
  isPrePull,
  isRetryable,
  parseDuration,
  parseRetryAfter,
  retry,
  decodeParameters,
} from "@botpool/client";

import { packageDir } from "./testserver.js";

const apiError = (status: number, retryAfterMs?: number): BotApiError =>
  new BotApiError({ status, serverMessage: "x", method: "GET", path: "/", retryAfterMs });
const networkError = (): BotApiNetworkError => new BotApiNetworkError("GET /: fetch failed", { method: "GET", path: "/" });

describe("isRetryable: the rule of botclient.Retryable", () => {
  const abort = new DOMException("This operation was aborted", "AbortError");
  const timeout = new DOMException("The operation was aborted due to timeout", "TimeoutError");
  const cases: [string, unknown, boolean][] = [
    ["503", apiError(503), true],
    ["429", apiError(429), true],
    ["502", apiError(502), true],
    ["504", apiError(504), true],
    ["a wrapped 503", new Error("wrapped", { cause: apiError(503) }), true],
    ["500", apiError(500), false],
    ["409", apiError(409), false],
    ["403", apiError(403), false],
    ["404", apiError(404), false],
    ["401", apiError(401), false],
    ["410", apiError(410), false],
    ["no answer", networkError(), true],
    ["no answer in time", new BotApiNetworkError("timeout", { method: "GET", path: "/", timedOut: true }), true],
    ["a wrapped network error", new Error("wrapped", { cause: networkError() }), true],
    ["an abort", abort, false],
    ["a signal's timeout", timeout, false],
    ["a 503 wrapped in an abort", new Error("x", { cause: new DOMException("aborted", "AbortError") }), false],
    ["an abort wrapping a 503", Object.assign(new Error("aborted", { cause: apiError(503) }), { name: "AbortError" }), false],
    ["a JSON error", new SyntaxError("Unexpected token"), false],
    ["a plain error", new Error("x"), false],
    ["a string", "x", false],
    ["undefined", undefined, false],
    ["null", null, false],
  ];
  for (const [name, err, want] of cases) {
    test(name, () => assert.equal(isRetryable(err), want));
  }
});

describe("retry: the pauses of botclient.Retry, and Retry-After", () => {
  /** A call failing with errs in turn, then resolving "ok". */
  const calls = (...errs: unknown[]): { call: () => Promise<string>; count: () => number } => {
    let n = 0;
    return {
      call: async () => {
        n++;
        if (n <= errs.length) {
          throw errs[n - 1];
        }
        return "ok";
      },
      count: () => n,
    };
  };

  test("two 503s then success: three calls", async () => {
    const c = calls(apiError(503), apiError(503));
    assert.equal(await retry(c.call, { attempts: 5, firstDelayMs: 1, maxDelayMs: 1 }), "ok");
    assert.equal(c.count(), 3);
  });

  test("503s past the attempts: the last 503", async () => {
    const last = apiError(503);
    const c = calls(apiError(503), apiError(503), last, apiError(503));
    await assert.rejects(retry(c.call, { attempts: 3, firstDelayMs: 1, maxDelayMs: 1 }), (e) => e === last);
    assert.equal(c.count(), 3);
  });

  test("a 409 is not retried", async () => {
    const c = calls(apiError(409));
    await assert.rejects(retry(c.call, { attempts: 5, firstDelayMs: 1 }), { status: 409 });
    assert.equal(c.count(), 1);
  });

  test("attempts 0 tries once", async () => {
    const c = calls(apiError(503));
    await assert.rejects(retry(c.call, { attempts: 0, firstDelayMs: 1 }), { status: 503 });
    assert.equal(c.count(), 1);
  });

  test("aborted while pausing: the signal's reason after one call", async () => {
    const c = calls(apiError(503), apiError(503));
    const ac = new AbortController();
    const p = retry(c.call, { attempts: 5, firstDelayMs: 3_600_000, signal: ac.signal });
    setImmediate(() => ac.abort());
    await assert.rejects(p, { name: "AbortError" });
    assert.equal(c.count(), 1);
  });

  test("pauses double up to the most, and are at least the Retry-After", async () => {
    const delays: number[] = [];
    const c = calls(apiError(503), apiError(503), apiError(503), apiError(429, 7), networkError());
    await retry(c.call, { attempts: 10, firstDelayMs: 1, maxDelayMs: 4, onRetry: (_e, _a, ms) => delays.push(ms) });
    assert.deepEqual(delays, [1, 2, 4, 7, 4]);
  });
});

describe("durations", () => {
  test("parseDuration reads what Go writes", () => {
    const cases: [string, number][] = [
      ["0s", 0],
      ["0", 0],
      ["10s", 10_000],
      ["100ms", 100],
      ["1h0m0s", 3_600_000],
      ["1m30s", 90_000],
      ["1.5s", 1500],
      ["2h45m", 9_900_000],
      ["1500us", 1.5],
      ["1500\u00b5s", 1.5],
      ["-1s", -1000],
    ];
    for (const [s, ms] of cases) {
      assert.equal(parseDuration(s), ms, s);
    }
  });

  test("parseDuration refuses what Go refuses", () => {
    for (const s of ["", "10", "s", "1d", "1 s", "1s ", "--1s", "1.s.s"]) {
      assert.throws(() => parseDuration(s), RangeError, JSON.stringify(s));
    }
  });

  test("formatDuration writes a wait the operator reads", () => {
    assert.equal(formatDuration(30_000), "30s");
    assert.equal(formatDuration(60_000), "60s");
    assert.equal(formatDuration(1500), "1500ms");
  });

  test("parseRetryAfter: seconds or an HTTP date", () => {
    const now = Date.parse("2026-01-15T14:00:00Z");
    assert.equal(parseRetryAfter("1", now), 1000);
    assert.equal(parseRetryAfter("0", now), undefined);
    assert.equal(parseRetryAfter(null, now), undefined);
    assert.equal(parseRetryAfter("soon", now), undefined);
    assert.equal(parseRetryAfter("Thu, 15 Jan 2026 14:00:05 GMT", now), 5000);
    assert.equal(parseRetryAfter("Thu, 15 Jan 2026 13:00:00 GMT", now), undefined);
  });
});

describe("configuration", () => {
  const env = { BOTPOOL_API_URL: "http://botapi:8082/", POOL_SLOT_UUID: "app-1", BOTPOOL_SLOT_TOKEN: "bpt_x" };

  test("fromEnv reads the three variables", () => {
    const client = BotClient.fromEnv(env);
    assert.equal(client.baseUrl, "http://botapi:8082");
    assert.equal(client.appUuid, "app-1");
  });

  test("fromEnv names what is missing", () => {
    assert.throws(
      () => BotClient.fromEnv({ BOTPOOL_API_URL: "http://botapi:8082", BOTPOOL_SLOT_TOKEN: "" }),
      (err: unknown) => {
        assert.ok(err instanceof BotClientConfigError);
        assert.deepEqual(err.missing, ["POOL_SLOT_UUID", "BOTPOOL_SLOT_TOKEN"]);
        assert.match(err.message, /missing: POOL_SLOT_UUID, BOTPOOL_SLOT_TOKEN/);
        return true;
      },
    );
  });

  test("a URL that is not http(s) is refused", () => {
    assert.throws(() => BotClient.fromEnv({ ...env, BOTPOOL_API_URL: "botapi:8082" }), BotClientConfigError);
    assert.throws(() => BotClient.fromEnv({ ...env, BOTPOOL_API_URL: "not a url" }), BotClientConfigError);
  });

  test("isPrePull: BOTPOOL_PREPULL=1", () => {
    assert.equal(isPrePull({ BOTPOOL_PREPULL: "1" }), true);
    assert.equal(isPrePull({ BOTPOOL_PREPULL: "0" }), false);
    assert.equal(isPrePull({}), false);
  });
});

describe("the package", () => {
  const pkg = JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8")) as {
    type: string;
    engines: { node: string };
    dependencies?: unknown;
    devDependencies: Record<string, string>;
    exports: { ".": { types: string; default: string } };
    files: string[];
  };

  test("has no runtime dependencies, and exact devDependencies", () => {
    assert.equal(pkg.dependencies, undefined);
    for (const [name, version] of Object.entries(pkg.devDependencies)) {
      assert.match(version, /^\d+\.\d+\.\d+$/, `${name} is not pinned`);
    }
  });

  test("is an ES module for Node 20 and later, whose exports are built", () => {
    assert.equal(pkg.type, "module");
    assert.equal(pkg.engines.node, ">=20");
    for (const file of [pkg.exports["."].types, pkg.exports["."].default]) {
      assert.ok(existsSync(path.join(packageDir, file)), `${file} is not built`);
      assert.ok(pkg.files.some((f) => file.startsWith(`./${f}/`)), `${file} is not in files`);
    }
  });
});

describe("decodeParameters: the bot's parameters as the image's type", () => {
  interface Transcription {
    transcription: { provider: string; language?: string };
  }
  const isTranscription = (v: unknown): v is Transcription =>
    typeof v === "object" && v !== null && typeof (v as { transcription?: { provider?: unknown } }).transcription?.provider === "string";
  const base = { bot: "standup", namespace: "team-a", meetingUrl: "https://meet.google.com/abc-defg-hij", platform: "google-meet",
    recording: false, maxDuration: "1h0m0s", automaticLeave: {}, heartbeatInterval: "10s" };

  test("a value of the image's shape comes back typed", () => {
    const got = decodeParameters({ ...base, parameters: { transcription: { provider: "deepgram", language: "de" } } }, isTranscription,
      { transcription: { provider: "none" } });
    assert.equal(got.transcription.provider, "deepgram");
    assert.equal(got.transcription.language, "de");
  });
  test("absent parameters are the fallback", () => {
    assert.deepEqual(decodeParameters(base, isTranscription, { transcription: { provider: "none" } }), { transcription: { provider: "none" } });
  });
  test("a value of another shape throws, naming the bot", () => {
    assert.throws(() => decodeParameters({ ...base, parameters: { transcription: 3 } }, isTranscription, { transcription: { provider: "none" } }),
      /bot standup: its parameters/);
  });
});
