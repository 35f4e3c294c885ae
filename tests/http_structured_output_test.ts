/**
 * `response_format` on both HTTP APIs, through the real handler: the sessions API and the OpenAI-compatible
 * route pass it to the model and answer the checked JSON, 502 `invalid_output` with the errors when the
 * repaired answer is still invalid, a 400 naming the problem for a format the runtime cannot use; and a
 * provider that rejects `response_format` answered through `AGENT_RESPONSE_FORMAT=prompt`.
 */
import assert from "node:assert/strict";
import { Ajv2020 } from "./_dev_deps.ts";
import { parseResponseFormat } from "../src/agent/response_format.ts";
import { ScriptedLLM } from "../src/llm/scripted.ts";
import { HttpLLM } from "../src/llm/client.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { keyOf } from "./_harness.ts";
import { httpHarness, parseSse, postMessage } from "./_http_harness.ts";

const SCHEMA = {
  type: "object",
  properties: { city: { type: "string" }, population: { type: "integer" } },
  required: ["city", "population"],
  additionalProperties: false,
};
const FORMAT = { type: "json_schema", json_schema: { name: "city", schema: SCHEMA, strict: true } };
const VALID = '{"city":"Lyon","population":522250}';

function completion(body: Record<string, unknown>, headers: Record<string, string> = {}): Request {
  return new Request("http://agent.test/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "mini-agent", ...body }),
  });
}

Deno.test("POST /v1/sessions/{id}/messages with response_format answers the checked JSON, repaired once if need be", async () => {
  using h = httpHarness();
  const llm = new ScriptedLLM([{ content: '{"city":"Lyon"}' }, { content: VALID }]);
  h.deps.agent.llm = llm;
  const response = await h.handler(postMessage("s1", { message: "Lyon?", response_format: FORMAT }));
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.equal(body.outcome, "answered");
  assert.equal(body.answer, VALID);
  assert.deepEqual(llm.requests[0].responseFormat, {
    type: "json_schema",
    name: "city",
    schema: SCHEMA,
    strict: true,
  });
  assert.match(llm.requests[1].messages.at(-1)!.content!, /\$\.population: required property is missing/);
});

Deno.test("both APIs answer an answer still invalid after the repair 502 invalid_output, with the errors", async () => {
  const invalid = '{"city":7,"population":1}';
  for (const api of ["sessions", "openai"] as const) {
    for (const stream of [false, true]) {
      using h = httpHarness();
      h.deps.agent.llm = new ScriptedLLM([{ content: invalid }, { content: invalid }]);
      const request = api === "sessions"
        ? postMessage(
          "s1",
          { message: "Lyon?", response_format: FORMAT },
          stream ? { accept: "text/event-stream" } : {},
        )
        : completion({ messages: [{ role: "user", content: "Lyon?" }], response_format: FORMAT, stream }, {
          "x-session-id": "s1",
        });
      const response = await h.handler(request);
      const text = await response.text();
      let error: Record<string, unknown>;
      if (!stream) {
        assert.equal(response.status, 502, text);
        error = JSON.parse(text).error;
      } else if (api === "sessions") {
        const frames = parseSse(text);
        assert.deepEqual(frames.map((f) => f.event).slice(-4), [
          "output_invalid",
          "answer",
          "run_end",
          "error",
        ]);
        error = frames.at(-1)!.data.error as Record<string, unknown>;
        assert.equal(error.status, 502);
      } else {
        const frames = text.split("\n\n").filter((f) => f !== "").map((f) => f.slice("data: ".length));
        assert.notEqual(frames.at(-1), "[DONE]");
        error = JSON.parse(frames.at(-1)!).error;
      }
      const where = `${api} ${stream ? "stream" : "json"}`;
      assert.equal(error.code, "invalid_output", where);
      assert.deepEqual(error.errors, ["$.city: expected string, got integer"], where);
      assert.match(
        String(error.message),
        /does not match the response format, even after a repair request: \$\.city/,
      );
      assert.match(String(error.run_id), /\S/, where);
      // The turn is over and stored with its answer: nothing to retry.
      const stored = await h.store.messages(keyOf("s1", "local"));
      assert.deepEqual(stored.map((m) => m.role), ["user", "runtime", "assistant"], where);
    }
  }
});

Deno.test("POST /v1/chat/completions with response_format sends the format and answers the JSON, whole or as one chunk", async () => {
  using h = httpHarness();
  const llm = new ScriptedLLM([
    { content: "Looking it up.", toolCalls: [{ name: "calculator", arguments: { expression: "1+1" } }] },
    { content: VALID, deltas: ['{"city":', '"Lyon","population":522250}'] },
    { content: VALID, deltas: ['{"city":', '"Lyon","population":522250}'] },
  ]);
  h.deps.agent.llm = llm;
  const messages = [{ role: "user", content: "Lyon?" }];
  const json = await (await h.handler(completion({ messages, response_format: FORMAT }))).json();
  assert.equal(json.choices[0].message.content, VALID, "the text before the tool call is not part of it");
  assert.equal(json.choices[0].finish_reason, "stop");
  assert.equal(llm.requests[0].responseFormat?.type, "json_schema");
  const streamed = await h.handler(
    completion({ messages, response_format: { type: "json_object" }, stream: true }),
  );
  const chunks = (await streamed.text()).split("\n\n").filter((f) => f !== "" && f !== "data: [DONE]")
    .map((f) => JSON.parse(f.slice("data: ".length)));
  const contents = chunks.map((c) => c.choices[0]?.delta.content).filter((c) => c !== undefined && c !== "");
  assert.deepEqual(contents, [VALID], "checked before it is sent: one piece");
  assert.deepEqual(llm.requests[2].responseFormat, { type: "json_object" });
});

Deno.test("a response_format the runtime cannot use is a 400 on both APIs, naming the problem, and nothing is stored", async () => {
  using h = httpHarness();
  const cases: [unknown, string, RegExp][] = [
    [
      { type: "xml" },
      "response_format.type",
      /response_format\.type must be "json_schema", "json_object" or "text", got "xml"/,
    ],
    ["json", "response_format", /response_format must be an object, got string/],
    [
      { type: "json_schema", json_schema: { name: "x", schema: "object" } },
      "response_format.json_schema.schema",
      /#: a schema must be an object, got string/,
    ],
    [
      { type: "json_schema", json_schema: { name: "x", schema: { type: "object", required: "a" } } },
      "response_format.json_schema.schema",
      /#\/required: expected an array of strings, got string/,
    ],
  ];
  for (const [format, param, message] of cases) {
    const session = await h.handler(postMessage("bad", { message: "hi", response_format: format }));
    assert.equal(session.status, 400);
    const sessionError = (await session.json()).error;
    assert.equal(sessionError.code, "invalid_body");
    assert.match(sessionError.message, /^Cannot read response_format: /);
    assert.match(sessionError.message, message);
    const openai = await h.handler(
      completion({ messages: [{ role: "user", content: "hi" }], response_format: format }, {
        "x-session-id": "bad",
      }),
    );
    assert.equal(openai.status, 400);
    const openaiError = (await openai.json()).error;
    assert.equal(openaiError.type, "invalid_request_error");
    assert.equal(openaiError.param, param);
    assert.match(openaiError.message, message);
  }
  assert.equal(h.llm.calls, 0);
  assert.equal(await h.store.get(keyOf("bad", "local")), null);
  // Plain text asked for explicitly is the default.
  const text = await h.handler(postMessage("ok", { message: "hi", response_format: { type: "text" } }));
  assert.equal((await text.json()).answer, "echo: hi");
});

Deno.test("a provider that rejects response_format is answered through AGENT_RESPONSE_FORMAT=prompt: the schema in the system message", async () => {
  const provider = startFakeProvider({ rejectResponseFormat: true });
  try {
    using h = httpHarness();
    h.deps.agent.llm = new HttpLLM({ baseUrl: provider.url, model: "local", retries: 0 });
    const ask = () =>
      h.handler(
        completion({ messages: [{ role: "user", content: `say: ${VALID}` }], response_format: FORMAT }),
      );
    const native = await ask();
    assert.equal(native.status, 502);
    assert.match((await native.json()).error.message, /'response_format' is not supported by this server/);

    h.deps.agent.responseFormatMode = "prompt";
    const prompted = await ask();
    assert.equal(prompted.status, 200);
    assert.equal((await prompted.json()).choices[0].message.content, VALID);
    const sent = provider.requests.at(-1)!;
    assert.ok(!Object.hasOwn(sent, "response_format"));
    const system = (sent.messages as { role: string; content: string }[]).filter((m) => m.role === "system");
    assert.ok(
      system.some((m) => m.content.includes(JSON.stringify(SCHEMA))),
      "the schema is in a system message",
    );
  } finally {
    await provider.close();
  }
});

Deno.test("GET /openapi.json describes response_format as both routes read it, and invalid_output's errors", async () => {
  using h = httpHarness();
  const doc = await (await h.handler(new Request("http://agent.test/openapi.json"))).json();
  const ajv = new Ajv2020({ strict: false, validateFormats: false });
  ajv.addSchema(doc, "agent");
  const described = ajv.getSchema("agent#/components/schemas/ResponseFormat")!;
  const formats: unknown[] = [
    { type: "json_object" },
    { type: "text" },
    { type: "json_schema", json_schema: { schema: {} } },
    { type: "json_schema", json_schema: { name: "a_b-1", schema: SCHEMA, strict: null, description: "d" } },
    { type: "json_schema", json_schema: { name: "a b", schema: {} } },
    { type: "json_schema", json_schema: { name: "x" } },
    { type: "json_schema", json_schema: { schema: [] } },
    { type: "json_schema", json_schema: { schema: {}, strict: "yes" } },
    { type: "json_schema" },
    { type: "xml" },
    "json_object",
  ];
  for (const format of formats) {
    const read = (() => {
      try {
        parseResponseFormat(format);
        return true;
      } catch {
        return false;
      }
    })();
    assert.equal(described(format), read, JSON.stringify(format));
  }
  assert.deepEqual(doc.components.schemas.ChatCompletionRequest.properties.response_format, {
    $ref: "#/components/schemas/ResponseFormat",
  });
  const turn = doc.paths["/v1/sessions/{id}/messages"].post;
  assert.deepEqual(turn.requestBody.content["application/json"].schema.properties.response_format, {
    $ref: "#/components/schemas/ResponseFormat",
  });
  assert.match(turn.responses["502"].description, /invalid_output/);
  assert.ok(doc.components.schemas.Error.properties.error.properties.errors);
  assert.match(doc.paths["/v1/chat/completions"].post.responses["502"].description, /invalid_output/);
});
