// Starts the real bot API for the tests: the Go program in ../testserver (botapi's handlers over
// in-memory Kubernetes objects and store, on loopback), and drives its control API.
import { spawn, execFileSync, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { setTimeout as delay } from "node:timers/promises";

import { BotClient, type BotClientOptions } from "@botpool/client";

/** The package's directory (this file runs from .test-build/test/). */
export const packageDir = fileURLToPath(new URL("../../", import.meta.url));

/** A slot the test server made: what its container's environment holds. */
export interface Slot {
  slot: string;
  appUuid: string;
  token: string;
}

/** One request the bot API received; status is 0 while it is being served. */
export interface Request {
  method: string;
  path: string;
  query?: string;
  status: number;
}

/** A bot as the test server shows it. */
export interface BotView {
  phase: string;
  reason?: string;
  message?: string;
  recordingLocation?: string;
  started: boolean;
  claimed: boolean;
  deleting: boolean;
  heartbeats: boolean;
  events: { type: string; at: string; data?: unknown }[];
}

export class TestServer {
  readonly apiUrl: string;
  readonly controlUrl: string;
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #stderr: string[];
  readonly #cleanup: () => void;

  constructor(apiUrl: string, controlUrl: string, child: ChildProcessWithoutNullStreams, stderr: string[], cleanup: () => void) {
    this.apiUrl = apiUrl;
    this.controlUrl = controlUrl;
    this.#child = child;
    this.#stderr = stderr;
    this.#cleanup = cleanup;
  }

  /** What the server wrote on stderr (its last lines). */
  get stderr(): string {
    return this.#stderr.join("");
  }

  async control<T>(method: "GET" | "POST", route: string, body: Record<string, string | number> = {}): Promise<T> {
    let url = this.controlUrl + route;
    const init: RequestInit = { method };
    if (method === "GET") {
      url += "?" + new URLSearchParams(Object.entries(body).map(([k, v]): [string, string] => [k, String(v)])).toString();
    } else {
      init.body = JSON.stringify(Object.fromEntries(Object.entries(body).map(([k, v]) => [k, String(v)])));
    }
    const res = await fetch(url, init);
    const text = await res.text();
    if (!res.ok) {
      throw new Error(`control ${method} ${route}: ${res.status} ${text}`);
    }
    return JSON.parse(text) as T;
  }

  /** A new Idle slot, with its application and token. */
  newSlot(): Promise<Slot> {
    return this.control<Slot>("POST", "/slots");
  }

  /** The client a slot's container builds from its environment. */
  client(slot: Slot, options: Partial<BotClientOptions> = {}): BotClient {
    return BotClient.fromEnv(this.env(slot), options);
  }

  /** The environment the operator gives the slot's container. */
  env(slot: Slot): Record<string, string> {
    return { BOTPOOL_API_URL: this.apiUrl, POOL_SLOT_UUID: slot.appUuid, BOTPOOL_SLOT_TOKEN: slot.token };
  }

  /** Creates a bot and binds it to the slot; returns the bot's name. */
  async bind(slot: Slot, options: { bot?: string; logLevel?: string } = {}): Promise<string> {
    const out = await this.control<{ bot: string }>("POST", "/bind", { slot: slot.slot, ...options });
    return out.bot;
  }

  bot(name: string): Promise<BotView> {
    return this.control<BotView>("GET", "/bot", { name });
  }

  requests(): Promise<Request[]> {
    return this.control<Request[]>("GET", "/requests");
  }

  /** The config requests of a slot. */
  async configRequests(slot: Slot): Promise<Request[]> {
    return (await this.requests()).filter((r) => r.path === `/v1/slots/${slot.appUuid}/config`);
  }

  /** The requests of a bot's route (heartbeat, status, events). */
  async botRequests(bot: string, route: string): Promise<Request[]> {
    return (await this.requests()).filter((r) => r.path === `/v1/bots/${bot}/${route}`);
  }

  /** Stops the server: it exits when its stdin closes. */
  async stop(): Promise<void> {
    const exited = new Promise<void>((resolve) => {
      if (this.#child.exitCode !== null || this.#child.signalCode !== null) {
        resolve();
      } else {
        this.#child.once("exit", () => resolve());
      }
    });
    this.#child.stdin.end();
    const timer = setTimeout(() => this.#child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
    this.#cleanup();
  }
}

/**
 * Starts the test server: the binary BOTPOOL_TESTSERVER names (the Go test that runs `npm test`
 * builds it), else one built now with `go build`.
 */
export async function startTestServer(): Promise<TestServer> {
  let bin = process.env["BOTPOOL_TESTSERVER"];
  let cleanup = (): void => {};
  if (!bin) {
    const dir = mkdtempSync(path.join(tmpdir(), "botpool-testserver-"));
    bin = path.join(dir, "testserver");
    execFileSync("go", ["build", "-o", bin, "./testserver"], { cwd: packageDir, stdio: "inherit" });
    cleanup = () => rmSync(dir, { recursive: true, force: true });
  }
  const child = spawn(bin, [], { stdio: ["pipe", "pipe", "pipe"] });
  const stderr: string[] = [];
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk: string) => {
    stderr.push(chunk);
    if (stderr.length > 200) {
      stderr.shift();
    }
  });
  const lines = createInterface({ input: child.stdout });
  const ready = await new Promise<{ apiUrl: string; controlUrl: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the test server did not start within 60 s: ${stderr.join("")}`)), 60_000);
    lines.once("line", (line) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(line) as { apiUrl: string; controlUrl: string });
      } catch (err) {
        reject(err);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the test server exited (${code}) before it was ready: ${stderr.join("")}`));
    });
    child.once("error", reject);
  });
  return new TestServer(ready.apiUrl, ready.controlUrl, child, stderr, cleanup);
}

/**
 * Waits until cond holds, looking every 20 ms, for at most timeoutMs (generous: the tests must
 * pass on a busy machine); throws naming what it waited for.
 */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await delay(20);
  }
}
