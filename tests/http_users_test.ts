/** Over HTTP a session belongs to its user: ids are per user, and another user's id looks unused. */
import assert from "node:assert/strict";
import { keyOf } from "./_harness.ts";
import { type HttpHarness, httpHarness, postMessage } from "./_http_harness.ts";

const ALICE = { token: "alice-token-0123456789", userId: "alice" };
const BOB = { token: "bob-token-9876543210ab", userId: "bob" };
const as = (user: { token: string }) => ({ authorization: `Bearer ${user.token}` });

async function call(
  h: HttpHarness,
  path: string,
  user: { token: string },
  method = "GET",
): Promise<{ status: number; body: unknown }> {
  const response = await h.handler(new Request(`http://agent.test${path}`, { method, headers: as(user) }));
  return { status: response.status, body: response.status === 204 ? null : await response.json() };
}

async function turn(h: HttpHarness, session: string, user: { token: string }, message: string) {
  const response = await h.handler(postMessage(session, { message }, as(user)));
  return { status: response.status, body: await response.json() };
}

Deno.test("bob posting to squat-1 first does not take the id: alice's POST to squat-1 gets 200 and her own turn 1", async () => {
  using h = httpHarness({ tokens: [ALICE, BOB] });
  const squat = await turn(h, "squat-1", BOB, "mine now");
  assert.equal(squat.status, 200);
  const second = await turn(h, "squat-1", BOB, "still mine");
  assert.equal((second.body as { turn: number }).turn, 2);

  const alice = await turn(h, "squat-1", ALICE, "hello");
  assert.equal(alice.status, 200);
  const { session_id, turn: turnNumber, outcome, answer } = alice.body as Record<string, unknown>;
  assert.deepEqual({ session_id, turnNumber, outcome, answer }, {
    session_id: "squat-1",
    turnNumber: 1,
    outcome: "answered",
    answer: "echo: hello",
  });
  const hers = await call(h, "/v1/sessions/squat-1", ALICE);
  assert.deepEqual(
    (hers.body as { messages: { content: string }[] }).messages.map((m) => m.content),
    ["hello", "echo: hello"],
  );
  assert.equal((await h.store.get(keyOf("squat-1", "bob")))!.turnCount, 2, "bob's session is his, untouched");
  assert.equal((await h.store.get(keyOf("squat-1", "alice")))!.turnCount, 1);
});

Deno.test("for an id only alice has, bob's GET, DELETE and /todos answer 404 exactly like a never-used id", async () => {
  using h = httpHarness({ tokens: [ALICE, BOB] });
  assert.equal((await turn(h, "x", ALICE, "alice's secret")).status, 200);
  await h.store.addTodo(keyOf("x", "alice"), "alice's todo");

  for (const [method, suffix] of [["GET", ""], ["DELETE", ""], ["GET", "/todos"], ["GET", "/trace"]]) {
    const taken = await call(h, `/v1/sessions/x${suffix}`, BOB, method);
    const unused = await call(h, `/v1/sessions/y${suffix}`, BOB, method);
    assert.equal(taken.status, 404, `${method} x${suffix}`);
    assert.equal(unused.status, 404, `${method} y${suffix}`);
    // Same body, but for the id it names: nothing tells bob that x exists.
    assert.deepEqual(JSON.parse(JSON.stringify(taken.body).replaceAll('\\"x\\"', '\\"y\\"')), unused.body);
    assert.ok(!JSON.stringify(taken.body).includes("alice"));
  }
  assert.equal((await h.store.messages(keyOf("x", "alice"))).length, 2, "bob's DELETE removed nothing");
  assert.deepEqual((await h.store.listTodos(keyOf("x", "alice"))).map((t) => t.text), ["alice's todo"]);
  assert.equal(await h.store.get(keyOf("x", "bob")), null, "bob's reads created no session");
  assert.equal((await call(h, "/v1/sessions/x", ALICE)).status, 200);
});

Deno.test("GET /v1/sessions lists only the caller's own sessions, including an id another user also has", async () => {
  using h = httpHarness({ tokens: [ALICE, BOB] });
  for (
    const [session, user] of [["shared", ALICE], ["a-only", ALICE], ["shared", BOB], ["b-only", BOB]] as const
  ) {
    assert.equal((await turn(h, session, user, `hi from ${user.token}`)).status, 200);
  }
  const ids = async (user: { token: string }) =>
    ((await call(h, "/v1/sessions", user)).body as { sessions: { id: string }[] }).sessions.map((s) => s.id)
      .sort();
  assert.deepEqual(await ids(ALICE), ["a-only", "shared"]);
  assert.deepEqual(await ids(BOB), ["b-only", "shared"]);
  assert.equal((await call(h, "/v1/sessions/shared", BOB, "DELETE")).status, 204);
  assert.deepEqual(await ids(BOB), ["b-only"]);
  assert.deepEqual(await ids(ALICE), ["a-only", "shared"], "bob's delete of his shared leaves alice's");
});
