// The bot API's OpenAPI document (docs/botapi.openapi.yaml) as an ajv-based validator loads it:
// openapi-backend in its strict mode, with ajv's strict mode, compiles a validator for every
// request and answer the document describes. Redocly's lint (`npm run lint:openapi`, run by
// `npm test` first) checks the document's form; the Go contract test (botapi/openapi_test.go)
// holds it to the server.
import assert from "node:assert/strict";
import path from "node:path";
import { before, describe, test } from "node:test";

import addFormats from "ajv-formats";
import { OpenAPIBackend, type Document } from "openapi-backend";

import { packageDir } from "./testserver.js";

const specFile = path.join(packageDir, "..", "..", "docs", "botapi.openapi.yaml");

/**
 * An OpenAPIBackend that refuses what strict tools refuse: `strict` makes a document that does not
 * validate as OpenAPI (or whose schemas ajv cannot compile) fail init() instead of logging a
 * warning; ajv's own strict mode refuses keywords it cannot place (`maxLength` without
 * `type: string`…) and unknown formats, hence the standard formats added.
 */
async function strictBackend(definition: string | Document): Promise<OpenAPIBackend> {
  const api = new OpenAPIBackend({
    definition,
    strict: true,
    validate: true,
    ajvOpts: { strict: true },
    customizeAjv: (ajv) => {
      addFormats.default(ajv);
      return ajv;
    },
  });
  await api.init();
  return api;
}

/** A bot's events request, in the form validateRequest takes. */
function eventsRequest(body: unknown) {
  return {
    method: "POST",
    path: "/v1/bots/standup/events",
    headers: { "content-type": "application/json" },
    body,
  };
}

describe("the OpenAPI document", () => {
  // Loaded once (a strict load compiles every schema: seconds on a busy machine); a document
  // that fails to load fails every test below.
  let api: OpenAPIBackend;
  before(async () => {
    api = await strictBackend(specFile);
  });

  test("loads in openapi-backend and ajv, both strict", () => {
    assert.deepEqual(api.getOperations().map((op) => op.operationId).sort(), [
      "getConfig",
      "heartbeat",
      "reportStatus",
      "sendEvents",
    ]);
  });

  test("gives an event's data any JSON value, null included", () => {
    for (const data of [null, { name: "Ann" }, [1, "two"], [], "text", 1.5, 7, true, false]) {
      const result = api.validateRequest(eventsRequest({ events: [{ type: "log", data }] }), "sendEvents");
      assert.equal(result.valid, true, `data ${JSON.stringify(data)}: ${JSON.stringify(result.errors)}`);
    }
    // The same validator does refuse: the answers above are not a validator that takes anything.
    const result = api.validateRequest(eventsRequest({ events: [] }), "sendEvents");
    assert.equal(result.valid, false, "an events request without events was taken");
  });
});

// The faults strict tools found in the document (issue 32's type-less `nullable`, and what ajv's
// strict types refused once that was fixed), each in a document otherwise valid: the strict load
// must refuse them, or the tests above would pass a document that strict tools refuse.
describe("the strict load", () => {
  for (const [fault, schema, want] of [
    ["nullable without a type", { nullable: true }, /"nullable" cannot be used without "type"/],
    [
      "maxLength without type: string",
      { allOf: [{ type: "string" }], maxLength: 8 },
      /strict mode: missing type "string" for keyword "maxLength"/,
    ],
  ] as const) {
    test(`refuses ${fault}`, async () => {
      const doc = {
        openapi: "3.0.3",
        info: { title: "fault", version: "v1" },
        paths: {
          "/things": {
            post: {
              operationId: "postThing",
              requestBody: { content: { "application/json": { schema } } },
              responses: { "204": { description: "Taken." } },
            },
          },
        },
      } as unknown as Document;
      await assert.rejects(strictBackend(doc), want);
    });
  }
});
