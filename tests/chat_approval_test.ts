/**
 * The chat's approval prompt, with piped answers: a paused turn is asked about on the status stream and
 * resumes; the output holds answers only. A run that ends with a turn waiting exits 3 and says where to decide.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { runChat } from "../src/cli/chat.ts";
import { runTurn } from "../src/agent/loop.ts";
import { harness, keyOf, textSink } from "./_harness.ts";
import type { Harness } from "./_harness.ts";

const addTodo = (text: string, id: string) => ({ name: "todo", arguments: { action: "add", text }, id });

async function pipedChat(
  h: Harness,
  lines: string,
): Promise<{ code: number; output: string; status: string }> {
  const input = new PassThrough();
  input.end(lines);
  const output = textSink();
  const status = textSink();
  const code = await runChat({
    ...keyOf("s"),
    deps: h.agent,
    store: h.store,
    emit: () => {},
    input,
    output: output.stream,
    status: status.stream,
    interactive: false,
  });
  return { code, output: output.text(), status: status.text() };
}

Deno.test("chat asks before an ask tool runs and resumes with the piped answer", async () => {
  using h = harness([{ toolCalls: [addTodo("milk", "t1")] }, { content: "Added milk." }]);
  h.agent.approval = parseApprovalPolicy({ tools: { todo: "ask" } });
  const { code, output, status } = await pipedChat(h, "add milk\nmaybe\ny\n");
  assert.equal(code, 0);
  assert.match(
    status,
    /Allow todo \{"action":"add","text":"milk"\}\? \[y\]es \/ \[n\]o \/ \[a\]lways for this session/,
  );
  assert.match(status, /Please answer y, n or a\./);
  // One question, one answer line: no prompt and no word of the wait on the output.
  assert.equal(output, "Added milk.\n");
  assert.deepEqual((await h.store.listTodos(keyOf("s"))).map((t) => t.text), ["milk"]);
  assert.equal(await h.store.pendingStep(keyOf("s")), null);
});

Deno.test("chat: 'n' denies the call; 'a' allows the tool for the rest of the session", async () => {
  using h = harness([
    { toolCalls: [addTodo("milk", "t1")] },
    { content: "Not added." },
    { toolCalls: [addTodo("eggs", "t2")] },
    { content: "Added eggs." },
    { toolCalls: [addTodo("tea", "t3")] },
    { content: "Added tea." },
  ]);
  h.agent.approval = parseApprovalPolicy({ tools: { todo: "ask" } });
  const { output, status } = await pipedChat(h, "add milk\nn\nadd eggs\na\nadd tea\n");
  assert.equal(output, "Not added.\nAdded eggs.\nAdded tea.\n");
  assert.equal(status.match(/Allow todo/g)?.length, 2, "tea is not asked about");
  assert.deepEqual((await h.store.listTodos(keyOf("s"))).map((t) => t.text), ["eggs", "tea"]);
});

Deno.test("chat settles a turn left waiting by an earlier run before reading a new message", async () => {
  using h = harness([{ toolCalls: [addTodo("milk", "t1")] }, { content: "Added milk." }, { content: "hi" }]);
  h.agent.approval = parseApprovalPolicy({ tools: { todo: "ask" } });
  await runTurn({ ...keyOf("s"), message: "add milk" }, h.agent, { ...h.run, emit: () => {} });
  const { output, status } = await pipedChat(h, "y\nhello\n");
  assert.match(status, /^Allow todo[^\n]*\n$/);
  assert.equal(output, "Added milk.\nhi\n");
});

Deno.test("chat leaves the turn waiting, stored, when input ends before an answer, and exits 3 saying where to decide", async () => {
  using h = harness([{ toolCalls: [addTodo("milk", "t1")] }]);
  h.agent.approval = parseApprovalPolicy({ tools: { todo: "ask" } });
  const { code, output, status } = await pipedChat(h, "add milk\n");
  assert.equal(code, 3, "a script can tell the turn still waits");
  assert.equal(output, "");
  assert.match(status, /Allow todo/);
  assert.match(
    status,
    /! waiting for your approval to run todo: approve or deny in deno task chat --session s, on the web page or with POST \/v1\/sessions\/s\/approvals\n$/,
  );
  assert.notEqual(await h.store.pendingStep(keyOf("s")), null);
});
