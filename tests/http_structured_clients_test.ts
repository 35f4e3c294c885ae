/**
 * Structured output through the clients people use, against `deno task serve` as a subprocess with its real
 * permission flags and a fake provider: the official `openai` client's `parse()` (and its streaming helper)
 * with a zod schema, and the Vercel AI SDK's `generateObject` and `streamObject` (in a child process, see
 * `tests/fixtures/ai_sdk_client.ts`).
 */
import assert from "node:assert/strict";
import { z, zodResponseFormat } from "./_dev_deps.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { tempDir } from "./_harness.ts";
import { ask, client, runAiSdkClient, serveForClients } from "./_openai_client.ts";

const TOKEN = "tok-structured-0123456789";
const CITY = { city: "Lyon", population: 522250 };
const City = z.object({ city: z.string(), population: z.number().int() });

Deno.test("deno task serve answers the openai client's parse() and the AI SDK's generateObject and streamObject", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const { serve, url } = serveForClients(dir.path, provider.url, TOKEN);
  try {
    await serve.listening;
    const openai = client(url, TOKEN);
    const format = zodResponseFormat(City, "city");
    const parsed = await openai.chat.completions.parse({
      model: "mini-agent",
      messages: ask(`say: ${JSON.stringify(CITY)}`),
      response_format: format,
    });
    assert.deepEqual(parsed.choices[0].message.parsed, CITY);
    const sent = provider.requests.at(-1)!.response_format as Record<string, Record<string, unknown>>;
    assert.equal(sent.type, "json_schema");
    assert.equal(sent.json_schema.name, "city");
    assert.deepEqual(
      sent.json_schema.schema,
      format.json_schema.schema,
      "the client's schema reaches the provider",
    );

    const stream = openai.chat.completions.stream({
      model: "mini-agent",
      messages: ask(`say: ${JSON.stringify({ ...CITY, population: 7 })}`),
      response_format: format,
    });
    const final = await stream.finalChatCompletion();
    assert.deepEqual(final.choices[0].message.parsed, { ...CITY, population: 7 });

    const before = provider.requests.length;
    const lines = await runAiSdkClient("ai_sdk_client", [url, TOKEN, JSON.stringify(CITY)]);
    assert.deepEqual(lines.map((l) => [l.call, l.object]), [["generateObject", CITY], [
      "streamObject",
      CITY,
    ]]);
    assert.ok(Number(lines[1].partials) >= 1);
    const formats = provider.requests.slice(before).map((r) => r.response_format as Record<string, unknown>);
    assert.deepEqual(formats.map((f) => f.type), ["json_schema", "json_object"]);
    assert.equal((formats[0].json_schema as Record<string, unknown>).name, "city");
  } finally {
    const code = await serve.stop();
    await provider.close();
    assert.equal(code, 0, serve.stderr());
  }
  assert.match(serve.stderr(), /POST \/v1\/chat\/completions 200/);
  assert.doesNotMatch(serve.stderr(), /POST \/v1\/chat\/completions [45]\d\d/);
});
