/**
 * Session titles, kept in the store on SQLite and PostgreSQL: named from the first question in the write that
 * stores it, renamed by `PATCH /v1/sessions/{id}` and kept over later messages, named again from the first
 * question when renamed blank; a bad title is a 400 and another user's session a 404.
 */
import assert from "node:assert/strict";
import { createHandler } from "../src/http/handler.ts";
import type { SessionStore } from "../src/store/store.ts";
import { givenTitle, titleFrom } from "../src/text/title.js";
import { keyOf, storedMessage as msg } from "./_harness.ts";
import { httpHarness, postMessage } from "./_http_harness.ts";
import { storeTest } from "./_store_backends.ts";

const ALICE = { token: "alice-token", userId: "alice" };
const BOB = { token: "bob-token", userId: "bob" };
const as = (user: { token: string }) => ({ authorization: `Bearer ${user.token}` });

Deno.test("titleFrom() names a session from the first line with text, spaces collapsed, cut to 80 characters", () => {
  assert.equal(titleFrom("\n  \n  What   is\tthe time?  \nsecond line"), "What is the time?");
  assert.equal(titleFrom("a\u0000b\r\nc"), "a b", "control characters read as spaces");
  assert.equal(titleFrom(" \n\t"), "");
  const long = "é".repeat(100);
  assert.equal(titleFrom(long), `${"é".repeat(79)}…`);
  assert.equal([...titleFrom("😀".repeat(90))].length, 80, "cut by characters, not UTF-16 units");
});

Deno.test("givenTitle() trims and collapses a title, refusing a non-string or one over 80 characters", () => {
  assert.equal(givenTitle("  Trip\n plans  "), "Trip plans");
  assert.equal(givenTitle("   "), "");
  assert.equal(givenTitle("x".repeat(80)), "x".repeat(80));
  assert.throws(() => givenTitle("x".repeat(81)), {
    name: "RangeError",
    message: "Cannot rename the session: the title is 81 characters, at most 80 are allowed",
  });
  assert.throws(() => givenTitle(7), {
    name: "TypeError",
    message: "Cannot rename the session: the title must be a string, got number",
  });
});

storeTest(
  "$Store names a session from its first question as it stores it, and never over a given title",
  async (db) => {
    const store = await db.open();
    try {
      const key = keyOf("s");
      assert.equal((await store.getOrCreate(key)).title, null, "no title before the first question");
      await store.append(key, [msg("a0", "assistant", "a greeting first")]);
      assert.equal((await store.get(key))?.title, null, "an answer names nothing");
      await store.append(key, [
        msg("q1", "user", "\n  Plan   a trip\nto Lisbon"),
        msg("a1", "assistant", "ok"),
      ]);
      assert.equal((await store.get(key))?.title, "Plan a trip");
      await store.append(key, [msg("q2", "user", "Another question")]);
      assert.equal((await store.get(key))?.title, "Plan a trip", "later questions keep it");
      assert.deepEqual((await store.listSessions("u")).map((s) => [s.id, s.title]), [["s", "Plan a trip"]]);

      assert.equal((await store.renameSession(key, "  Lisbon\ntrip "))?.title, "Lisbon trip");
      await store.append(key, [msg("q3", "user", "Yet another")]);
      assert.equal((await store.get(key))?.title, "Lisbon trip", "a given title is kept over later messages");

      assert.equal(
        (await store.renameSession(key, " "))?.title,
        "Plan a trip",
        "blank: the first question's",
      );
      assert.equal(await store.renameSession(keyOf("s", "other"), "Mine"), null, "another user's: none");
      assert.equal((await store.get(key))?.title, "Plan a trip");
      await assert.rejects(store.renameSession(key, "x".repeat(81)), RangeError);
      await assert.rejects(store.renameSession(key, null as unknown as string), TypeError);
      assert.equal((await store.get(key))?.title, "Plan a trip", "a refused title changes nothing");

      const empty = keyOf("empty");
      await store.getOrCreate(empty);
      assert.equal((await store.renameSession(empty, ""))?.title, null, "blank without a question: none");
      assert.equal((await store.renameSession(empty, "Named early"))?.title, "Named early");
      await store.append(empty, [msg("q1", "user", "First question")]);
      assert.equal((await store.get(empty))?.title, "Named early", "named before its first question: kept");
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store stores a first question with NUL and a title cut at 80 characters", async (db) => {
  const store = await db.open();
  try {
    const key = keyOf("s");
    await store.getOrCreate(key);
    await store.append(key, [msg("q1", "user", `nul\u0000here ${"w".repeat(100)}`)]);
    const title = (await store.get(key))?.title ?? "";
    assert.equal(title, `nul here ${"w".repeat(70)}…`);
    assert.equal([...title].length, 80);
  } finally {
    await store.close();
  }
});

/** A handler of the HTTP routes on `store`, with Alice's and Bob's tokens. */
function handlerOn(store: SessionStore) {
  const h = httpHarness({ tokens: [ALICE, BOB] });
  const handler = createHandler({ ...h.deps, store });
  return { h, handler };
}

function patch(session: string, body: string, headers: Record<string, string>): Request {
  return new Request(`http://agent.test/v1/sessions/${session}`, {
    method: "PATCH",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
}

async function titles(handler: (r: Request) => Promise<Response>, user: { token: string }) {
  const response = await handler(new Request("http://agent.test/v1/sessions", { headers: as(user) }));
  assert.equal(response.status, 200);
  return ((await response.json()).sessions as { id: string; title: string | null }[]).map((
    s,
  ) => [s.id, s.title]);
}

storeTest(
  "$Store over HTTP: PATCH /v1/sessions/{id} renames, a blank title goes back to the first question",
  async (db) => {
    const store = await db.open();
    const { h, handler } = handlerOn(store);
    try {
      const asked = await handler(postMessage("trip", { message: "Plan a trip\nwith details" }, as(ALICE)));
      assert.equal(asked.status, 200);
      assert.deepEqual(await titles(handler, ALICE), [["trip", "Plan a trip"]]);

      const renamed = await handler(patch("trip", JSON.stringify({ title: "  Lisbon trip " }), as(ALICE)));
      assert.equal(renamed.status, 200);
      assert.deepEqual(await renamed.json(), { session_id: "trip", title: "Lisbon trip" });
      assert.equal((await handler(postMessage("trip", { message: "And hotels?" }, as(ALICE)))).status, 200);
      const got = await handler(new Request("http://agent.test/v1/sessions/trip", { headers: as(ALICE) }));
      const session = await got.json();
      assert.equal(session.title, "Lisbon trip", "kept over a later turn");
      assert.equal(session.turn_count, 2);

      const blank = await handler(patch("trip", JSON.stringify({ title: "" }), as(ALICE)));
      assert.deepEqual(await blank.json(), { session_id: "trip", title: "Plan a trip" });
      assert.deepEqual(await titles(handler, ALICE), [["trip", "Plan a trip"]]);
    } finally {
      h[Symbol.dispose]();
      await store.close();
    }
  },
);

storeTest(
  "$Store over HTTP: a bad title is a 400 and another user's session a 404, changing nothing",
  async (db) => {
    const store = await db.open();
    const { h, handler } = handlerOn(store);
    try {
      assert.equal((await handler(postMessage("trip", { message: "Plan a trip" }, as(ALICE)))).status, 200);
      const refused = async (request: Request, status: number, code: string, message?: string) => {
        const response = await handler(request);
        const body = await response.json();
        assert.equal(response.status, status, JSON.stringify(body));
        assert.equal(body.error.code, code);
        if (message !== undefined) assert.equal(body.error.message, message);
      };
      await refused(
        patch("trip", JSON.stringify({ title: "x".repeat(81) }), as(ALICE)),
        400,
        "invalid_body",
        "Cannot rename the session: the title is 81 characters, at most 80 are allowed",
      );
      await refused(
        patch("trip", JSON.stringify({ title: 42 }), as(ALICE)),
        400,
        "invalid_body",
        "Cannot rename the session: the title must be a string, got number",
      );
      await refused(
        patch("trip", JSON.stringify({ name: "x" }), as(ALICE)),
        400,
        "invalid_body",
        'Cannot rename the session: the body must be a JSON object with "title"',
      );
      await refused(patch("trip", "{not json", as(ALICE)), 400, "invalid_json");
      await refused(
        new Request("http://agent.test/v1/sessions/trip", {
          method: "PATCH",
          headers: { "content-type": "text/plain", ...as(ALICE) },
          body: "{}",
        }),
        415,
        "unsupported_media_type",
      );
      await refused(patch("trip", JSON.stringify({ title: "Bob's now" }), as(BOB)), 404, "not_found");
      await refused(patch("nope", JSON.stringify({ title: "x" }), as(ALICE)), 404, "not_found");
      await refused(patch("trip", JSON.stringify({ title: "x" }), {}), 401, "unauthorized");
      assert.deepEqual(await titles(handler, ALICE), [["trip", "Plan a trip"]], "nothing changed");
      assert.deepEqual(await titles(handler, BOB), []);
    } finally {
      h[Symbol.dispose]();
      await store.close();
    }
  },
);
