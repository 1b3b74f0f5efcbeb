// docs/callbacks.md's hand-written webhook verification (examples/verify-webhook.ts) on the
// Standard Webhooks specification's test vector (callback/sign_test.go signs the same), and the
// inputs it must refuse.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";

import { verifyWebhook } from "../examples/verify-webhook.js";
import { packageDir } from "./testserver.js";

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const body = '{"test": 2432232314}';
const at = 1614265330;
const signed = (): Record<string, string | undefined> => ({
  "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
  "webhook-timestamp": String(at),
  "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
});

describe("verifyWebhook", () => {
  test("accepts the specification's vector, with other signatures beside it and a key file's newline", () => {
    assert.equal(verifyWebhook(secret, signed(), body, at), true);
    const h = signed();
    h["webhook-signature"] = "v1,bm90IHRoaXMgb25l " + h["webhook-signature"];
    assert.equal(verifyWebhook(secret + "\n", h, body, at + 299), true);
  });
  const refused: [string, (h: Record<string, string | undefined>) => void, number?][] = [
    ["no timestamp", (h) => delete h["webhook-timestamp"]],
    ["an empty timestamp", (h) => (h["webhook-timestamp"] = "")],
    ["a timestamp that is not a number", (h) => (h["webhook-timestamp"] = "soon")],
    ["a timestamp with trailing text", (h) => (h["webhook-timestamp"] = `${at}abc`)],
    ["a negative timestamp", (h) => (h["webhook-timestamp"] = `-${at}`)],
    ["a timestamp in exponent form", (h) => (h["webhook-timestamp"] = "1.614265330e9")],
    ["a timestamp 301 s old", () => {}, at + 301],
    ["a timestamp 301 s ahead", () => {}, at - 301],
    ["no id", (h) => delete h["webhook-id"]],
    ["no signature", (h) => delete h["webhook-signature"]],
    ["another id", (h) => (h["webhook-id"] = "msg_other")],
  ];
  for (const [name, mutate, now] of refused) {
    test(`refuses ${name}`, () => {
      const h = signed();
      mutate(h);
      assert.equal(verifyWebhook(secret, h, body, now ?? at), false);
    });
  }
  test("refuses another body or key", () => {
    assert.equal(verifyWebhook(secret, signed(), body + " ", at), false);
    assert.equal(verifyWebhook("whsec_" + Buffer.from("another key").toString("base64"), signed(), body, at), false);
  });
  test("docs/callbacks.md shows examples/verify-webhook.ts as it is", () => {
    const docs = readFileSync(path.join(packageDir, "..", "..", "docs", "callbacks.md"), "utf8");
    const example = readFileSync(path.join(packageDir, "examples", "verify-webhook.ts"), "utf8");
    assert.ok(docs.includes("```ts\n" + example + "```\n"), "docs/callbacks.md's verification differs from examples/verify-webhook.ts: copy it over");
  });
});
