/**
 * Property-based tests of both stores: saving is idempotent by message id, turn counts follow distinct user
 * messages, and compaction keeps `turnCount === compactedTurns + stored user messages`. Each property migrates
 * its databases once; every case works under users and message ids of its own, so no case sees another's rows.
 */
import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import { type Session, type SessionKey, type SessionStore } from "../src/store/store.ts";
import type { Role, StoredMessage, ToolCall } from "../src/types.ts";
import { keyOf, steppingClock } from "./_harness.ts";
import { storeTest } from "./_store_backends.ts";

// ---------------------------------------------------------------------------------------------------------
// Arbitraries.

const ID_CHARS = "ABCxyz019._:-".split("");
const SESSION_ID = fc.oneof(
  { weight: 5, arbitrary: fc.string({ unit: fc.constantFrom(...ID_CHARS), minLength: 1, maxLength: 12 }) },
  { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(...ID_CHARS), minLength: 120, maxLength: 128 }) },
);
const USER_ID = fc.constantFrom("alice", "bob", "u.1:x-y_z");

/** Units of hostile text: quotes, SQL punctuation, escapes, control characters (never NUL), CJK, emoji. */
const UNIT = fc.constantFrom(
  ..."a Z7'\";--\\%_*/()".split(""),
  "' OR 1=1 --",
  "'); DROP TABLE messages; --",
  "\n",
  "\r\n",
  "\t",
  "\u0001",
  "\u001f",
  "\u007f",
  "你好",
  "é",
  "😀",
  "\u{10ffff}",
  "\ufeff",
  "\u2028",
);
const TEXT = fc.oneof(
  fc.string({ unit: UNIT, maxLength: 40 }),
  fc.string({ unit: "binary", maxLength: 40 }).map((s) => s.replaceAll("\0", "")),
  fc.string({ unit: "grapheme", maxLength: 20 }),
);

const TOOL_CALL: fc.Arbitrary<ToolCall> = fc.record({
  id: TEXT,
  name: fc.constantFrom("calculator", "todo", "search_mock", "x'; --"),
  arguments: fc.oneof(
    fc.dictionary(fc.string({ maxLength: 5 }), TEXT, { maxKeys: 3 }).map((o) => JSON.stringify(o)),
    TEXT,
  ),
}, { noNullPrototype: true });

/** A message without its id (ids are assigned so that they are globally unique, as the runtime's are). */
type Draft = Omit<StoredMessage, "id">;

const CREATED_AT = fc.date({
  min: new Date("2020-01-01T00:00:00Z"),
  max: new Date("2030-01-01T00:00:00Z"),
  noInvalidDate: true,
}).map((d) => d.toISOString());

const DRAFT: fc.Arbitrary<Draft> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ role: fc.constant<Role>("user"), content: TEXT, createdAt: CREATED_AT }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      role: fc.constant<Role>("assistant"),
      content: fc.option(TEXT),
      toolCalls: fc.array(TOOL_CALL, { maxLength: 3 }),
      createdAt: CREATED_AT,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      role: fc.constant<Role>("tool"),
      content: TEXT,
      toolCallId: TEXT,
      createdAt: CREATED_AT,
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ role: fc.constant<Role>("runtime"), content: TEXT, createdAt: CREATED_AT }),
  },
);

/** One `append` call as generated: new drafts, plus earlier messages of the session sent again. */
interface BatchPlan {
  session: number;
  fresh: Draft[];
  resend: number[];
  /** Send the session's whole state so far before the fresh messages, as a full re-save would. */
  full: boolean;
}

const BATCH: fc.Arbitrary<BatchPlan> = fc.record({
  session: fc.nat({ max: 2 }),
  fresh: fc.array(DRAFT, { maxLength: 5 }),
  resend: fc.array(fc.nat(), { maxLength: 3 }),
  full: fc.boolean(),
});

/** Sessions (each owned by `users[i]`), a prefix that makes message ids hostile too, and the batches. */
interface Plan {
  sessions: string[];
  users: string[];
  idPrefix: string;
  batches: BatchPlan[];
}

const PLAN: fc.Arbitrary<Plan> = fc.record({
  sessions: fc.uniqueArray(SESSION_ID, { minLength: 1, maxLength: 3 }),
  users: fc.array(USER_ID, { minLength: 3, maxLength: 3 }),
  idPrefix: TEXT,
  batches: fc.array(BATCH, { minLength: 1, maxLength: 10 }),
});

interface Batch {
  sessionId: string;
  messages: StoredMessage[];
}

/** Turns a plan into concrete `append` calls with globally unique message ids. */
function batchesOf(plan: Plan): Batch[] {
  let counter = 0;
  const sent = new Map<string, StoredMessage[]>();
  return plan.batches.map(({ session, fresh, resend, full }) => {
    const sessionId = plan.sessions[session % plan.sessions.length];
    const earlier = sent.get(sessionId) ?? [];
    const again = full
      ? [...earlier]
      : earlier.length === 0
      ? []
      : resend.map((i) => earlier[i % earlier.length]);
    const created = fresh.map((draft) => ({ ...draft, id: `${plan.idPrefix}#${counter++}` }));
    sent.set(sessionId, [...earlier, ...created]);
    return { sessionId, messages: [...again, ...created] };
  });
}

/** What `messages()` must return for a message: `toolCalls` only when non-empty, `toolCallId` when set. */
function stored(message: StoredMessage): StoredMessage {
  const expected: StoredMessage = {
    id: message.id,
    role: message.role,
    content: message.content,
    createdAt: message.createdAt,
  };
  if (message.toolCalls !== undefined && message.toolCalls.length > 0) expected.toolCalls = message.toolCalls;
  if (message.toolCallId !== undefined) expected.toolCallId = message.toolCallId;
  return expected;
}

/** The reference model: per session, the distinct messages in first-append order. */
function model(batches: Batch[]): Map<string, StoredMessage[]> {
  const seen = new Set<string>();
  const sessions = new Map<string, StoredMessage[]>();
  for (const { sessionId, messages } of batches) {
    const list = sessions.get(sessionId) ?? [];
    for (const m of messages) {
      if (seen.has(m.id)) continue;
      seen.add(m.id);
      list.push(stored(m));
    }
    sessions.set(sessionId, list);
  }
  return sessions;
}

/** The plan with its users and message ids made this case's own (`c<n>.…`), for a database cases share. */
function ownedBy(plan: Plan, n: number): Plan {
  return { ...plan, users: plan.users.map((user) => `c${n}.${user}`), idPrefix: `c${n}.${plan.idPrefix}` };
}

/** The key of one of the plan's sessions, under the user the plan gives it. */
function planKey(plan: Plan, sessionId: string): SessionKey {
  return keyOf(sessionId, plan.users[plan.sessions.indexOf(sessionId)]);
}

async function openAll(plan: Plan, store: SessionStore): Promise<void> {
  for (const [i, id] of plan.sessions.entries()) await store.getOrCreate(keyOf(id, plan.users[i]));
}

/** Everything observable about the plan's sessions, timestamps included. */
async function snapshot(plan: Plan, store: SessionStore) {
  return {
    sessions: await Promise.all(plan.sessions.map(async (id) => ({
      session: await store.get(planKey(plan, id)),
      messages: await store.messages(planKey(plan, id)),
    }))),
    lists: await Promise.all([...new Set(plan.users)].map((user) => store.listSessions(user))),
  };
}

// ---------------------------------------------------------------------------------------------------------
// Properties.

storeTest(
  "$Store.append() saving any sequence of states twice equals saving it once",
  async (onceDb, backend) => {
    await using twiceDb = await backend.fresh();
    await using sequenceDb = await backend.fresh();
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(PLAN, async (generated) => {
        const plan = ownedBy(generated, ++cases);
        const batches = batchesOf(plan);
        // One clock each: a repeated save that added nothing must not even touch updated_at.
        const once = await onceDb.open({ now: steppingClock() });
        const twiceInARow = await twiceDb.open({ now: steppingClock() });
        const sequenceTwice = await sequenceDb.open({ now: steppingClock() });
        try {
          for (const store of [once, twiceInARow, sequenceTwice]) await openAll(plan, store);
          const expected = model(batches);
          let total = 0;
          for (const { sessionId, messages } of batches) {
            const added = await once.append(planKey(plan, sessionId), messages);
            total += added;
            assert.equal(await twiceInARow.append(planKey(plan, sessionId), messages), added);
            assert.equal(
              await twiceInARow.append(planKey(plan, sessionId), messages),
              0,
              "the same batch again adds nothing",
            );
            assert.equal(await sequenceTwice.append(planKey(plan, sessionId), messages), added);
          }
          for (const { sessionId, messages } of batches) {
            assert.equal(
              await sequenceTwice.append(planKey(plan, sessionId), messages),
              0,
              "the whole sequence again adds nothing",
            );
          }
          assert.equal(total, [...expected.values()].reduce((n, list) => n + list.length, 0));

          const reference = await snapshot(plan, once);
          assert.deepEqual(await snapshot(plan, twiceInARow), reference);
          assert.deepEqual(await snapshot(plan, sequenceTwice), reference);
          for (const [i, id] of plan.sessions.entries()) {
            const messages = expected.get(id) ?? [];
            assert.deepEqual(await once.messages(planKey(plan, id)), messages);
            const session = (await once.get(planKey(plan, id)))!;
            assert.equal(session.userId, plan.users[i]);
            assert.equal(session.turnCount, messages.filter((m) => m.role === "user").length);
            assert.equal(session.compactedTurns, 0);
            assert.equal(session.summary, null);
          }
          // The store reads back the same after a reopen.
          await twiceInARow.close();
          const reopened = await twiceDb.open();
          try {
            assert.deepEqual(await snapshot(plan, reopened), reference);
          } finally {
            await reopened.close();
          }
        } finally {
          await once.close();
          await twiceInARow.close();
          await sequenceTwice.close();
        }
      }),
      { numRuns: backend.runs(150) },
    );
  },
);

const FIXED = new Date("2026-03-04T05:06:07.000Z");

storeTest(
  "$Store.append() of a prefix then the full list equals appending the full list",
  async (directDb, backend) => {
    await using stepwiseDb = await backend.fresh();
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(
        SESSION_ID,
        TEXT,
        fc.array(DRAFT, { maxLength: 20 }),
        fc.nat(),
        fc.array(fc.nat(), { maxLength: 6 }),
        async (sessionId, idPrefix, drafts, cut, repeats) => {
          const user = `c${++cases}`;
          const unique = drafts.map((d, i) => ({ ...d, id: `${user}/${idPrefix}#${i}` }));
          // Some ids appear twice in the list itself: only their first occurrence counts.
          const full = [...unique];
          if (unique.length > 0) {
            for (const r of repeats) full.splice(r % full.length, 0, unique[r % unique.length]);
          }
          const k = cut % (full.length + 1);
          const users = new Set(full.filter((m) => m.role === "user").map((m) => m.id));

          const stepwise = await stepwiseDb.open({ now: () => FIXED });
          const direct = await directDb.open({ now: () => FIXED });
          try {
            for (const store of [stepwise, direct]) await store.getOrCreate(keyOf(sessionId, user));
            const first = await stepwise.append(keyOf(sessionId, user), full.slice(0, k));
            const second = await stepwise.append(keyOf(sessionId, user), full);
            const all = await direct.append(keyOf(sessionId, user), full);
            assert.equal(all, unique.length);
            assert.equal(first + second, all);
            assert.equal(first, new Set(full.slice(0, k).map((m) => m.id)).size);
            assert.deepEqual(
              await stepwise.messages(keyOf(sessionId, user)),
              await direct.messages(keyOf(sessionId, user)),
            );
            assert.deepEqual(
              await stepwise.get(keyOf(sessionId, user)),
              await direct.get(keyOf(sessionId, user)),
            );
            assert.deepEqual(await stepwise.listSessions(user), await direct.listSessions(user));
            // turnCount counts distinct user-message ids, however often they were appended.
            assert.equal((await direct.get(keyOf(sessionId, user)))!.turnCount, users.size);
            assert.deepEqual(
              await direct.messages(keyOf(sessionId, user)),
              model([{ sessionId, messages: full }]).get(sessionId),
            );
          } finally {
            await stepwise.close();
            await direct.close();
          }
        },
      ),
      { numRuns: backend.runs(300) },
    );
  },
);

/** A step of the compaction property: append fresh messages, compact a prefix, or try an invalid cut. */
type Step =
  | { kind: "append"; session: number; drafts: Draft[] }
  | { kind: "compact"; session: number; cut: number; summary: string }
  | { kind: "bad"; session: number; cut: number; how: "unknown" | "other-session" | "twice" };

const STEP: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    kind: fc.constant("append" as const),
    session: fc.nat({ max: 1 }),
    drafts: fc.array(DRAFT, { minLength: 1, maxLength: 6 }),
  }),
  fc.record({
    kind: fc.constant("compact" as const),
    session: fc.nat({ max: 1 }),
    cut: fc.nat(),
    summary: TEXT,
  }),
  fc.record({
    kind: fc.constant("bad" as const),
    session: fc.nat({ max: 1 }),
    cut: fc.nat(),
    how: fc.constantFrom("unknown" as const, "other-session" as const, "twice" as const),
  }),
);

async function assertTurnInvariant(store: SessionStore, key: SessionKey): Promise<Session> {
  const session = (await store.get(key))!;
  const users = (await store.messages(key)).filter((m) => m.role === "user").length;
  assert.equal(session.turnCount, session.compactedTurns + users, JSON.stringify(session));
  return session;
}

storeTest(
  "$Store.applyCompaction() with random cut prefixes keeps turnCount = compactedTurns + users",
  async (db, backend) => {
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(STEP, { minLength: 1, maxLength: 25 }), async (steps) => {
        const user = `c${++cases}`;
        const store = await db.open({ now: steppingClock() });
        const ids = ["s-a", "s-b"];
        let counter = 0;
        try {
          for (const id of ids) await store.getOrCreate(keyOf(id, user));
          for (const step of steps) {
            const sessionId = ids[step.session];
            const before = await store.messages(keyOf(sessionId, user));
            if (step.kind === "append") {
              await store.append(
                keyOf(sessionId, user),
                step.drafts.map((d) => ({ ...d, id: `${user}/m${counter++}` })),
              );
            } else if (step.kind === "compact") {
              const k = step.cut % (before.length + 1);
              const cut = before.slice(0, k);
              const old = (await store.get(keyOf(sessionId, user)))!;
              const turns = cut.filter((m) => m.role === "user").length;
              await store.applyCompaction(
                keyOf(sessionId, user),
                step.summary,
                cut.map((m) => m.id),
                turns,
              );
              const now = (await store.get(keyOf(sessionId, user)))!;
              assert.equal(now.summary, step.summary);
              assert.equal(now.compactedTurns, old.compactedTurns + turns);
              assert.equal(now.turnCount, old.turnCount, "compaction never changes the turn count");
              assert.deepEqual(await store.messages(keyOf(sessionId, user)), before.slice(k));
            } else {
              const other = await store.messages(keyOf(ids[1 - step.session], user));
              const k = step.cut % (before.length + 1);
              const cut = before.slice(0, k).map((m) => m.id);
              const intruder = step.how === "unknown"
                ? "no-such-message"
                : step.how === "other-session"
                ? other[0]?.id ?? "no-such-message"
                : cut[0] ?? "no-such-message";
              cut.splice(step.cut % (cut.length + 1), 0, intruder);
              const old = {
                session: await store.get(keyOf(sessionId, user)),
                other: await store.messages(keyOf(ids[1 - step.session], user)),
              };
              await assert.rejects(
                async () => await store.applyCompaction(keyOf(sessionId, user), "{}", cut, 1),
                /Cannot compact session/,
              );
              // All or nothing: not one message or counter changed, in either session.
              assert.deepEqual(await store.get(keyOf(sessionId, user)), old.session);
              assert.deepEqual(await store.messages(keyOf(sessionId, user)), before);
              assert.deepEqual(await store.messages(keyOf(ids[1 - step.session], user)), old.other);
            }
            for (const id of ids) await assertTurnInvariant(store, keyOf(id, user));
          }
        } finally {
          await store.close();
        }
      }),
      { numRuns: backend.runs(200) },
    );
  },
);
