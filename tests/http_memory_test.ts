/**
 * `/v1/memory` over HTTP: each bearer user lists and erases only their own memory; deleting a session leaves
 * the memory, and erasing the memory leaves the sessions. A chat completion recalls the caller's memory too.
 */
import assert from "node:assert/strict";
import type { Message } from "../src/types.ts";
import { keyOf } from "./_harness.ts";
import { type HttpHarness, httpHarness, postMessage } from "./_http_harness.ts";

const ALICE = { token: "alice-token-0123456789", userId: "alice" };
const BOB = { token: "bob-token-9876543210ab", userId: "bob" };

async function call(h: HttpHarness, method: string, path: string, user?: { token: string }) {
  const headers: Record<string, string> = user === undefined ? {} : { authorization: `Bearer ${user.token}` };
  const response = await h.handler(new Request(`http://agent.test${path}`, { method, headers }));
  const text = await response.text();
  return { status: response.status, body: text === "" ? null : JSON.parse(text) };
}

Deno.test("GET /v1/memory lists the caller's items only, in the API's spelling", async () => {
  using h = httpHarness({ tokens: [ALICE, BOB] });
  await h.store.remember("alice", { items: ["Prefers tea", "Has a dog"], limit: 200 }, { sessionId: "s1" });
  await h.store.remember("bob", { items: ["Prefers coffee"], limit: 200 });
  const alice = await call(h, "GET", "/v1/memory", ALICE);
  assert.equal(alice.status, 200);
  assert.equal(alice.body.user_id, "alice");
  assert.deepEqual(alice.body.items.map((i: { text: string }) => i.text), ["Prefers tea", "Has a dog"]);
  assert.deepEqual(Object.keys(alice.body.items[0]).sort(), [
    "first_seen",
    "id",
    "last_seen",
    "last_used",
    "source_session",
    "text",
    "use_count",
  ]);
  assert.equal(alice.body.items[0].source_session, "s1");
  assert.deepEqual(
    (await call(h, "GET", "/v1/memory", BOB)).body.items.map((i: { text: string }) => i.text),
    [
      "Prefers coffee",
    ],
  );
  assert.equal((await call(h, "GET", "/v1/memory")).status, 401);
});

Deno.test("DELETE /v1/memory/{id} erases the caller's item (404 for another user's), DELETE /v1/memory all of it", async () => {
  using h = httpHarness({ tokens: [ALICE, BOB] });
  await h.store.remember("alice", { items: ["Prefers tea", "Has a dog"], limit: 200 });
  await h.store.remember("bob", { items: ["Prefers coffee"], limit: 200 });
  const [tea] = await h.store.listMemory("alice");
  const [bobs] = await h.store.listMemory("bob");
  assert.equal((await call(h, "DELETE", `/v1/memory/${bobs.id}`, ALICE)).status, 404);
  assert.equal((await h.store.listMemory("bob")).length, 1, "bob's item stays");
  assert.equal((await call(h, "DELETE", `/v1/memory/${tea.id}`, ALICE)).status, 204);
  const again = await call(h, "DELETE", `/v1/memory/${tea.id}`, ALICE);
  assert.equal(again.status, 404);
  assert.equal(again.body.error.code, "not_found");
  for (const bad of ["x", "0", "1.5", "99999999999"]) {
    const response = await call(h, "DELETE", `/v1/memory/${bad}`, ALICE);
    assert.equal(response.status, 400, bad);
    assert.equal(response.body.error.code, "invalid_id");
  }
  assert.deepEqual((await call(h, "DELETE", "/v1/memory", ALICE)).body, { deleted: 1 });
  assert.deepEqual(await h.store.listMemory("alice"), []);
  assert.equal((await h.store.listMemory("bob")).length, 1);
  assert.equal((await call(h, "DELETE", "/v1/memory", undefined)).status, 401);
});

Deno.test("deleting a session leaves the user's memory, and erasing the memory leaves the sessions", async () => {
  using h = httpHarness({ tokens: [ALICE] });
  const posted = await h.handler(
    postMessage("s1", { message: "hello" }, { authorization: `Bearer ${ALICE.token}` }),
  );
  assert.equal(posted.status, 200);
  await posted.body?.cancel();
  await h.store.remember("alice", { items: ["Prefers tea"], limit: 200 }, { sessionId: "s1" });
  assert.deepEqual((await call(h, "DELETE", "/v1/memory", ALICE)).body, { deleted: 1 });
  assert.notEqual(await h.store.get(keyOf("s1", "alice")), null, "the session stays");
  await h.store.remember("alice", { items: ["Prefers tea"], limit: 200 }, { sessionId: "s1" });
  assert.equal((await call(h, "DELETE", "/v1/sessions/s1", ALICE)).status, 204);
  assert.deepEqual(
    (await call(h, "GET", "/v1/memory", ALICE)).body.items.map((i: { text: string }) => i.text),
    [
      "Prefers tea",
    ],
  );
});

Deno.test("a chat completion, on its private session, recalls the caller's memory from the server's store", async () => {
  using h = httpHarness({ tokens: [ALICE, BOB] });
  h.deps.agent.userMemory = { items: 200, recall: 5 };
  const seen: Message[][] = [];
  const inner = h.deps.agent.llm;
  h.deps.agent.llm = {
    chat: (messages, options) => (seen.push(structuredClone(messages)), inner.chat(messages, options)),
  };
  await h.store.remember("alice", { items: ["Has a dog called Rex"], limit: 200 });
  const ask = (user: { token: string }) =>
    h.handler(
      new Request("http://agent.test/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "mini-agent",
          messages: [{ role: "user", content: "What is my dog called?" }],
        }),
      }),
    );
  assert.equal((await ask(ALICE)).status, 200);
  assert.equal((await ask(BOB)).status, 200);
  const carries = (request: Message[]) =>
    request.some((m) => m.role === "system" && /Rex/.test(m.content ?? ""));
  assert.equal(carries(seen[0]), true, "alice's request carries her item");
  assert.equal(carries(seen.at(-1)!), false, "bob's does not");
});
