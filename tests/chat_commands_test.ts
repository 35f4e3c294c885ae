/** The REPL's slash commands on a real store: each one's answer, and the session and model they change. */
import assert from "node:assert/strict";
import {
  type ChatState,
  completeCommand,
  isCommand,
  recordUsage,
  REPL_HELP,
  runCommand,
} from "../src/cli/commands.ts";
import { runTurn } from "../src/agent/loop.ts";
import { type Harness, harness, keyOf } from "./_harness.ts";

const usage = (prompt: number, completion: number) => ({
  promptTokens: prompt,
  completionTokens: completion,
  totalTokens: prompt + completion,
  cachedTokens: null,
});

/** Runs commands against `h.store` as user "local", starting in session "main"; collects what they say. */
function commands(h: Harness, setModel?: (name: string) => void) {
  const state: ChatState = {
    sessionId: "main",
    userId: "local",
    lastTurn: null,
    model: "m-1",
  };
  let said = "";
  let cleared = 0;
  let ids = 0;
  const context = {
    state,
    store: h.store,
    write: (text: string) => (said += `${text}\n`),
    clearScreen: () => cleared++,
    ...(setModel ? { setModel } : {}),
    newSessionId: () => `new-${++ids}`,
  };
  return {
    state,
    cleared: () => cleared,
    async run(line: string): Promise<string> {
      said = "";
      assert.ok(isCommand(line), line);
      assert.equal(await runCommand(line, context), "done");
      return said;
    },
  };
}

Deno.test("/new starts a session (a generated id if none), /switch goes to one you have, /sessions lists them", async () => {
  using h = harness([]);
  await h.store.getOrCreate(keyOf("main", "local"));
  await h.store.getOrCreate(keyOf("bobs", "bob"));
  const c = commands(h);
  assert.match(await c.run("/new"), /now in session new-1 \(user local\), 0 turns/);
  assert.equal(c.state.sessionId, "new-1");
  assert.match(await c.run("/new main"), /Session main already exists; \/switch main continues it/);
  assert.match(
    await c.run("/switch bobs"),
    /You have no session bobs/,
    "another user's session is not yours",
  );
  assert.match(await c.run("/switch bad id"), /You have no session bad/);
  assert.match(await c.run("/new bad!"), /Invalid session id "bad!"/);
  assert.match(await c.run("/switch"), /give a session id/);
  assert.equal(c.state.sessionId, "new-1");
  assert.match(await c.run("/switch main"), /now in session main/);
  assert.equal(c.state.sessionId, "main");
  const listed = await c.run("/sessions");
  assert.match(listed, /^\* main +0 turns +last used \d{4}-\d\d-\d\d \d\d:\d\d$/m);
  assert.match(listed, /^ {2}new-1 /m);
  assert.doesNotMatch(listed, /bobs/);
});

Deno.test("/rename titles the session in the store, kept over later questions; blank names it from its first question again", async () => {
  using h = harness([]);
  const c = commands(h);
  assert.match(await c.run("/rename Early"), /Cannot rename session main: it has no turns yet/);
  const key = keyOf("main", "local");
  await h.store.getOrCreate(key);
  await h.store.append(key, [{ id: "q1", role: "user", content: "Plan a trip\nto Lisbon", createdAt: "t" }]);
  assert.match(await c.run("/sessions"), /^\* main +1 turn +last used .* {2}Plan a trip$/m);
  assert.match(await c.run("/rename   Lisbon   trip "), /session main is now titled: Lisbon trip/);
  await h.store.append(key, [{ id: "q2", role: "user", content: "And hotels?", createdAt: "t" }]);
  assert.equal((await h.store.get(key))?.title, "Lisbon trip", "the store has it, for the page and HTTP");
  assert.match(await c.run("/sessions"), /^\* main .* {2}Lisbon trip$/m);
  assert.match(
    await c.run(`/rename ${"x".repeat(81)}`),
    /Cannot rename the session: the title is 81 characters, at most 80 are allowed/,
  );
  assert.equal((await h.store.get(key))?.title, "Lisbon trip", "a refused title changes nothing");
  assert.match(await c.run("/rename"), /session main is now titled: Plan a trip/);
});

Deno.test("/history shows the last n exchanges with their tool calls in brief", async () => {
  using h = harness([
    { toolCalls: [{ name: "calculator", arguments: { expression: "6*7" } }] },
    { content: "It is 42." },
    { content: "Hello!" },
  ]);
  for (const message of ["what is 6*7?", "hi"]) {
    await runTurn({ sessionId: "main", userId: "local", message }, h.agent, h.run);
  }
  const c = commands(h);
  assert.equal(
    await c.run("/history"),
    'last 2 of 2 exchanges:\nyou> what is 6*7?\n  ↳ calculator({"expression":"6*7"})\nagent> It is 42.\n' +
      "you> hi\nagent> Hello!\n",
  );
  assert.equal(await c.run("/history 1"), "last 1 of 2 exchanges:\nyou> hi\nagent> Hello!\n");
  assert.match(await c.run("/history 0"), /n must be a whole number of 1 or more/);
});

Deno.test("/memory lists the user's memory and /forget erases one item or all of it, leaving sessions", async () => {
  using h = harness([]);
  const c = commands(h);
  await h.store.getOrCreate(keyOf("main", "local"));
  assert.match(await c.run("/memory"), /^no memory yet/);
  await h.store.remember("local", { items: ["Prefers tea", "Has a dog called Rex"], limit: 200 }, {
    sessionId: "main",
  });
  await h.store.remember("other", { items: ["Not yours"], limit: 200 });
  const [tea, dog] = await h.store.listMemory("local");
  const listed = await c.run("/memory");
  assert.match(listed, /^2 items of memory, oldest first/);
  assert.match(
    listed,
    new RegExp(
      `\\n  ${tea.id}\\. Prefers tea  \\(from main, seen \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d, recalled 0 times\\)`,
    ),
  );
  assert.ok(!listed.includes("Not yours"));
  assert.equal(await c.run(`/forget ${tea.id}`), `forgot item ${tea.id}\n`);
  assert.match(await c.run(`/forget ${tea.id}`), /Cannot forget item \d+: you have no such item/);
  const [theirs] = await h.store.listMemory("other");
  assert.match(await c.run(`/forget ${theirs.id}`), /no such item/, "another user's id erases nothing");
  assert.match(await c.run("/forget"), /Cannot forget: give an item id/);
  assert.match(await c.run("/forget x1"), /Cannot forget: give an item id/);
  assert.deepEqual((await h.store.listMemory("local")).map((i) => i.id), [dog.id]);
  assert.equal(await c.run("/forget all"), "forgot 1 item of your memory\n");
  assert.deepEqual(await h.store.listMemory("local"), []);
  assert.equal((await h.store.listMemory("other")).length, 1);
  assert.notEqual(await h.store.get(keyOf("main", "local")), null, "the session stays");
});

Deno.test("/summary shows the [RUNTIME CONTEXT] data, or says there is none yet", async () => {
  using h = harness([]);
  const c = commands(h);
  await h.store.getOrCreate(keyOf("main", "local"));
  assert.match(await c.run("/summary"), /no summary yet/);
  const summary = {
    goals: ["plan a trip"],
    facts: [],
    todos: ["book train"],
    unresolved: [],
    updated_at: "2026-06-01",
  };
  await h.store.applyCompaction(keyOf("main", "local"), JSON.stringify(summary), [], 0);
  assert.equal(
    await c.run("/summary"),
    "[RUNTIME CONTEXT] summary, updated 2026-06-01:\ngoals:\n  - plan a trip\nfacts: (none)\ntodos:\n  - book train\n" +
      "unresolved: (none)\n",
  );
});

Deno.test("/usage shows the session's tokens as stored, other processes' turns too, and the last turn's", async () => {
  using h = harness([
    { content: "a", usage: usage(100, 20) },
    { content: "b", usage: usage(1000, 30) },
    { content: "elsewhere", usage: usage(5, 5) },
  ]);
  const c = commands(h);
  assert.match(await c.run("/usage"), /this session \(main\): no model calls yet/);
  // Turns another process ran on the same database: this chat's state never saw them.
  await runTurn({ sessionId: "main", userId: "local", message: "one" }, h.agent, h.run);
  await runTurn({ sessionId: "main", userId: "local", message: "two" }, h.agent, h.run);
  await runTurn({ sessionId: "other", userId: "local", message: "three" }, h.agent, h.run);
  recordUsage(c.state, usage(1000, 30));
  const text = await c.run("/usage");
  assert.match(
    text,
    /this session \(main\): 1,150 tokens \(1,100 prompt \+ 50 completion\) over 2 model calls, as stored/,
  );
  assert.match(text, /last turn: 1,030 tokens \(1,000 prompt \+ 30 completion\)/);
});

Deno.test("/usage says how many prompt tokens the provider read from its cache, in the session and the last turn", async () => {
  const cached = { promptTokens: 1200, completionTokens: 30, totalTokens: 1230, cachedTokens: 1024 };
  using h = harness([{ content: "a", usage: cached }, { content: "b", usage: usage(100, 20) }]);
  const c = commands(h);
  await runTurn({ sessionId: "main", userId: "local", message: "one" }, h.agent, h.run);
  await runTurn({ sessionId: "main", userId: "local", message: "two" }, h.agent, h.run);
  recordUsage(c.state, cached);
  const text = await c.run("/usage");
  assert.match(
    text,
    /this session \(main\): 1,350 tokens \(1,300 prompt, 1,024 of them cached, \+ 50 completion\) over 2 model calls/,
  );
  assert.match(text, /last turn: 1,230 tokens \(1,200 prompt, 1,024 of them cached, \+ 30 completion\)/);
  recordUsage(c.state, usage(100, 20));
  assert.match(
    await c.run("/usage"),
    /last turn: 120 tokens \(100 prompt \+ 20 completion\)/,
    "none cached, none said",
  );
});

Deno.test("/usage says how many prompt tokens the provider wrote to its cache, beside the cached ones or alone", async () => {
  const both = { ...usage(1100, 50), cachedTokens: 800, cacheWriteTokens: 200 };
  const writes = { ...usage(300, 10), cachedTokens: 0, cacheWriteTokens: 250 };
  using h = harness([{ content: "a", usage: both }, { content: "b", usage: writes }]);
  const c = commands(h);
  await runTurn({ sessionId: "main", userId: "local", message: "one" }, h.agent, h.run);
  await runTurn({ sessionId: "main", userId: "local", message: "two" }, h.agent, h.run);
  recordUsage(c.state, both);
  const text = await c.run("/usage");
  assert.match(
    text,
    /this session \(main\): 1,460 tokens \(1,400 prompt, 800 of them cached, 450 written to the cache, \+ 60 completion\) over 2 model calls/,
  );
  assert.match(
    text,
    /last turn: 1,150 tokens \(1,100 prompt, 800 of them cached, 200 written to the cache, \+ 50 completion\)/,
  );
  recordUsage(c.state, writes);
  assert.match(
    await c.run("/usage"),
    /last turn: 310 tokens \(300 prompt, 250 of them written to the cache, \+ 10 completion\)/,
  );
});

Deno.test("/usage says how many of the session's calls had no counts and were estimated", async () => {
  using h = harness([{ content: "no counts", usage: null }]);
  const c = commands(h);
  await runTurn({ sessionId: "main", userId: "local", message: "hello" }, h.agent, h.run);
  assert.match(await c.run("/usage"), /over 1 model call; 1 call without counts, estimated, as stored/);
});

Deno.test("/model swaps the model through the injected setter, and says so when there is none", async () => {
  using h = harness([]);
  const chosen: string[] = [];
  const c = commands(h, (name) => chosen.push(name));
  assert.equal(await c.run("/model"), "model: m-1\n");
  assert.match(await c.run("/model gpt-4o"), /model is now gpt-4o/);
  assert.deepEqual(chosen, ["gpt-4o"]);
  assert.equal(await c.run("/model"), "model: gpt-4o\n");
  assert.match(await commands(h).run("/model x"), /Cannot change the model here/);
});

Deno.test("/help lists every command, /clear clears, an unknown command points to /help", async () => {
  using h = harness([]);
  const c = commands(h);
  const help = await c.run("/help");
  for (
    const name of [
      "/new",
      "/sessions",
      "/switch",
      "/rename",
      "/history",
      "/summary",
      "/usage",
      "/model",
      "/clear",
    ]
  ) {
    assert.ok(help.includes(`  ${name} `), name);
  }
  assert.equal(help, `${REPL_HELP}\n`);
  await c.run("/clear");
  assert.equal(c.cleared(), 1);
  assert.match(await c.run("/nope"), /Unknown command \/nope; \/help lists the commands/);
});

Deno.test("isCommand() takes /word lines only, not paths or pasted text", () => {
  assert.ok(isCommand("/help"));
  assert.ok(isCommand("/history 3"));
  assert.ok(!isCommand("/etc/hosts: what is this?"));
  assert.ok(!isCommand("/help\nmore lines"));
  assert.ok(!isCommand("hello /help"));
});

Deno.test("completeCommand() completes command names and the user's session ids after /switch", async () => {
  using h = harness([]);
  for (const id of ["dev", "demo", "prod"]) await h.store.getOrCreate(keyOf(id, "local"));
  await h.store.getOrCreate(keyOf("dark", "bob"));
  assert.deepEqual(await completeCommand("/sw", h.store, "local"), ["/switch "]);
  assert.deepEqual(await completeCommand("/he", h.store, "local"), ["/help"]);
  assert.deepEqual(await completeCommand("/ren", h.store, "local"), ["/rename "]);
  assert.deepEqual((await completeCommand("/switch d", h.store, "local")).sort(), [
    "/switch demo",
    "/switch dev",
  ]);
  assert.deepEqual(await completeCommand("hello", h.store, "local"), []);
});
