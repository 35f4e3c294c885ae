/**
 * `deno task serve` as a subprocess, with its real permission flags, answering the official `openai` client
 * over loopback: a plain and a streamed completion through a fake provider, a kept session visible in the
 * sessions API, a self-contained request that leaves the database alone, and a bad token.
 */
import assert from "node:assert/strict";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { tempDir } from "./_harness.ts";
import { ask, assertValid, client, OpenAI, rejection, serveForClients } from "./_openai_client.ts";

const TOKEN = "tok-openai-serve-0123456789";

Deno.test("deno task serve answers the openai client: plain, streamed, with and without a session", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const { serve, url } = serveForClients(dir.path, provider.url, TOKEN);
  try {
    await serve.listening;
    const openai = client(url, TOKEN);
    const completion = await openai.chat.completions.create({
      model: "mini-agent",
      messages: ask("what is 12*7?"),
    });
    assertValid("completion", completion);
    assert.equal(completion.choices[0].message.content, "The answer is 84.");
    assert.deepEqual(completion.usage, { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30 });

    const stream = await openai.chat.completions.create(
      {
        model: "mini-agent",
        messages: ask("what is 6*7?"),
        stream: true,
        stream_options: { include_usage: true },
      },
      { headers: { "X-Session-Id": "oa-proc" } },
    );
    let text = "";
    let finish = null;
    for await (const chunk of stream) {
      assertValid("chunk", chunk);
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, "The answer is 42.");
    assert.equal(finish, "stop");

    // Only the kept session is in the database; it holds the whole turn.
    const auth = { authorization: `Bearer ${TOKEN}` };
    const sessions = await (await fetch(`${url}/v1/sessions`, { headers: auth })).json();
    assert.deepEqual(sessions.sessions.map((s: { id: string }) => s.id), ["oa-proc"]);
    const session = await (await fetch(`${url}/v1/sessions/oa-proc`, { headers: auth })).json();
    assert.equal(session.turn_count, 1);
    assert.deepEqual(session.messages.map((m: { role: string }) => m.role), [
      "user",
      "assistant",
      "tool",
      "assistant",
    ]);

    const error = await rejection(client(url, "tok-wrong-0000000000").models.list());
    assert.ok(error instanceof OpenAI.AuthenticationError, String(error));
  } finally {
    const code = await serve.stop();
    await provider.close();
    assert.equal(code, 0, serve.stderr());
  }
  assert.doesNotMatch(serve.stderr(), new RegExp(TOKEN));
  assert.match(serve.stderr(), /POST \/v1\/chat\/completions 200/);
});
