/**
 * Every way a turn ends, as the client of the agent's own MCP server sees it: `ask` called over `/mcp`
 * through the SDK's client, with a progress token and without, gets the same tool result (an answer, or a
 * tool error in the words of the other surfaces) from the rule model in process and from the rule model
 * behind the real model client of each wire format (`LLM_API`), the model streamed and whole; with a token,
 * one progress notification per model call. What the session kept and the trace's outcome back each result,
 * and a failure whose words say to retry is retried so. (`ask` takes no response format: there is no
 * `invalid_output` here.)
 */
import assert from "node:assert/strict";
import {
  type ElicitRequest,
  ElicitRequestSchema,
  type Progress,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { BUDGET_ANSWER, MAX_STEPS_ANSWER } from "../src/agent/loop.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { LlmError } from "../src/errors.ts";
import { McpEndpoint } from "../src/mcp/http_endpoint.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { SessionLeases } from "../src/session/leases.ts";
import { SessionRunner } from "../src/session/runner.ts";
import { LLM_APIS, type LlmApi } from "../src/types.ts";
import { FakeClock } from "./_fake_clock.ts";
import { failSecondAppend, leaseStoreWith } from "./_harness.ts";
import { type HttpHarness, httpHarness, until } from "./_http_harness.ts";
import { ruleProvider } from "./_rule_provider.ts";

const sdk = await loadMcpSdk();
const TOKEN = "tok-alice-0123456789";
const KEY = { userId: "alice", sessionId: "s" };

/** The model of a run: the rule model itself, or the rule model behind the wire of an `LLM_API`. */
type Wire = { api: LlmApi; stream: boolean } | null;

const WIRES: Wire[] = [
  null,
  ...LLM_APIS.flatMap((api) => [{ api, stream: false }, { api, stream: true }]),
];

/** What the client got of one `ask`, and what the turn left behind. */
interface Seen {
  /** The tool result, its run id and loopback ports made alike; or the message the call rejected with. */
  result: { isError: boolean; text: string; structured: unknown } | { rejected: string };
  /** `progress message` of each progress notification, in order (none without a progress token). */
  progress: string[];
  /** The messages the session kept: each role, with the text of an assistant's or a tool's. */
  kept: string[];
  /** The outcome of each run in the trace. */
  ended: string[];
  /** What the client was asked through elicitation, when it answers elicitation. */
  elicited?: string[];
  /** When the outcome's text says to retry: the result of doing so, and what the session kept then. */
  retried?: { result: Seen["result"]; kept: string[] };
}

/** One way for a turn to end: how to set it up, how to end it once it runs, what the client gets. */
interface Outcome {
  name: string;
  message: string;
  setup?: (h: HttpHarness) => void;
  /** Runs once the model was called, while it is held; `client` aborts the `ask`. */
  during?: (h: HttpHarness, client: AbortController) => void | Promise<void>;
  /** The deadline of a model client's attempt, in seconds, when the test needs a short one. @default {60} */
  modelTimeoutSeconds?: number;
  /** How the client answers elicitation; a client without it cannot. @default {undefined} */
  elicit?: "accept" | "decline";
  /** What the client gets with a progress token; without one, the same but no progress notification. */
  gets: Seen;
  /** Makes the fault go, before the client retries as the outcome's text says. @default {undefined} (no retry) */
  heal?: (h: HttpHarness) => void;
  /**
   * The tool error's text with the rule model in process, which fails in its own words rather than in the
   * words the model client gives a provider's error. @default {the text of `gets`}
   */
  inProcessText?: string;
}

/** The tool result of a turn on session "s" that ended `outcome` with `answer`. */
function answered(answer: string, toolCalls: unknown[] = [], outcome = "answered"): Seen["result"] {
  return {
    isError: false,
    text: answer,
    structured: { session_id: "s", run_id: "…", turn: 1, outcome, answer, tool_calls: toolCalls },
  };
}

/** A tool error saying `text`. */
function refused(text: string): Seen["result"] {
  return { isError: true, text, structured: null };
}

/** The calculator call the rule model makes for `expression`, as `tool_calls` lists it. */
function calculated(expression: string, ok = true) {
  return { name: "calculator", arguments: JSON.stringify({ expression }), ok };
}

/** The stored result of the calculator's call on `expression`, as `Seen.kept` shows it. */
function calculatorResult(expression: string, result: number): string {
  return `tool: {"ok":true,"data":${JSON.stringify({ expression, result })},"error":null,"truncated":false}`;
}

/** How a failed turn's tool error says to run its saved message again. */
const RETRY = 'ask again with "retry": true and the same session_id';
const MODEL_FAILED = "LLM request failed: HTTP 500";
const MODEL_TIMED_OUT = "LLM request timed out after 0.05 s";

/** What a failed model call's tool error says, `what` the model client's words. */
function modelFailure(what: string): string {
  return `Sorry, I could not get an answer from the model: ${what}. ` +
    `Your message is saved; ${RETRY}, without sending it again.`;
}

/** The clock of each harness's leases. */
const leaseClocks = new WeakMap<HttpHarness, FakeClock>();

/** What a client that answers elicitation is asked of the calculator call on "2+2". */
const ELICITED =
  'The agent wants to run: calculator {"expression":"2+2"}. Accept to approve, decline to deny.';

const OUTCOMES: Outcome[] = [
  {
    name: "answered",
    message: "hello",
    gets: {
      result: answered("echo: hello"),
      progress: ["1 step 1: answered"],
      kept: ["user", "assistant: echo: hello"],
      ended: ["answered"],
    },
  },
  {
    name: "answered, with text written before a tool call",
    message: "what is 6*7?",
    setup: (h) => (h.llm.preamble = "Let me work that out."),
    // The answer is the last step's: the text before the call is kept with the session, not answered.
    gets: {
      result: answered("The answer is 42.", [calculated("6*7")]),
      progress: ["1 step 1: 1 tool call(s)", "2 step 2: answered"],
      kept: [
        "user",
        "assistant: Let me work that out.",
        calculatorResult("6*7", 42),
        "assistant: The answer is 42.",
      ],
      ended: ["answered"],
    },
  },
  {
    name: "max_steps",
    message: "what is 1+1?",
    setup: (h) => (h.deps.agent.maxSteps = 1),
    gets: {
      result: answered(MAX_STEPS_ANSWER, [calculated("1+1")], "max_steps"),
      progress: ["1 step 1: 1 tool call(s)"],
      kept: ["user", "assistant", calculatorResult("1+1", 2), `assistant: ${MAX_STEPS_ANSWER}`],
      ended: ["max_steps"],
    },
  },
  {
    name: "budget",
    message: "hello",
    setup: (h) => (h.deps.agent.maxTurnTokens = 1),
    // The model is not called: no step to report.
    gets: {
      result: answered(BUDGET_ANSWER, [], "budget"),
      progress: [],
      kept: ["user", `assistant: ${BUDGET_ANSWER}`],
      ended: ["budget"],
    },
  },
  {
    name: "timeout: the turn's deadline passed",
    message: "hello",
    setup: (h) => {
      h.deps.agent.turnTimeoutSeconds = 30;
      h.deps.agent.clock = new FakeClock();
      h.llm.hold = true;
    },
    during: (h) => (h.deps.agent.clock as FakeClock).advance(30_000),
    gets: {
      result: refused(
        'Cannot finish the turn on session "s": it passed its time limit of 30 s ' +
          "(AGENT_TURN_TIMEOUT_SECONDS); nothing of the turn was kept, send it again or ask for less at once",
      ),
      progress: [],
      kept: [],
      ended: ["timeout"],
    },
  },
  {
    name: "awaiting_approval, for a client without elicitation",
    message: "what is 2+2?",
    setup: (h) => (h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } })),
    gets: {
      result: {
        isError: false,
        text: 'The turn waits for approval of calculator {"expression":"2+2"}. Decide with POST ' +
          '/v1/sessions/s/approvals and the same token, body {"decisions": {"<call id>": "approve" or ' +
          '"deny"}} (the ids are in structuredContent.approval.calls).',
        structured: {
          session_id: "s",
          run_id: "…",
          turn: 1,
          outcome: "awaiting_approval",
          approval: { calls: [{ id: "call_1", name: "calculator", arguments: '{"expression":"2+2"}' }] },
        },
      },
      progress: ["1 step 1: 1 tool call(s)"],
      // The waiting step is stored apart: the history holds no call without its result.
      kept: ["user"],
      ended: ["awaiting_approval"],
    },
  },
  {
    name: "answered, the calls approved through elicitation",
    message: "what is 2+2?",
    setup: (h) => (h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } })),
    elicit: "accept",
    gets: {
      result: answered("The answer is 4.", [calculated("2+2")]),
      // The run resumed after the approval counts its steps on.
      progress: ["1 step 1: 1 tool call(s)", "2 step 2: answered"],
      kept: ["user", "assistant", calculatorResult("2+2", 4), "assistant: The answer is 4."],
      ended: ["awaiting_approval", "answered"],
      elicited: [ELICITED],
    },
  },
  {
    name: "answered, the calls denied through elicitation",
    message: "what is 2+2?",
    setup: (h) => (h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } })),
    elicit: "decline",
    // The rule model answers a failed call with its result's missing number.
    gets: {
      result: answered("The answer is undefined.", [calculated("2+2", false)]),
      progress: ["1 step 1: 1 tool call(s)", "2 step 2: answered"],
      kept: [
        "user",
        "assistant",
        'tool: {"ok":false,"data":null,"error":"denied by the user","truncated":false}',
        "assistant: The answer is undefined.",
      ],
      ended: ["awaiting_approval", "answered"],
      elicited: [ELICITED],
    },
  },
  {
    name: "error: the model failed",
    message: "hello",
    setup: (h) => (h.llm.fail = new LlmError(MODEL_FAILED, { kind: "http", status: 500 })),
    gets: {
      result: refused(modelFailure(`${MODEL_FAILED} from 127.0.0.1:…: ${MODEL_FAILED}`)),
      progress: [],
      kept: ["user"],
      ended: ["error"],
      // As the text says: the saved message runs again, stored once, the turn keeping its number.
      retried: { result: answered("echo: hello"), kept: ["user", "assistant: echo: hello"] },
    },
    heal: (h) => (h.llm.fail = null),
    inProcessText: modelFailure(MODEL_FAILED),
  },
  {
    name: "error: the model timed out",
    message: "hello",
    // In process, the rule model says what the model client says of its own deadline.
    setup: (h) => (h.llm.fail = new LlmError(MODEL_TIMED_OUT, { kind: "timeout" })),
    // Behind a wire, the reply never comes: the client's own deadline ends the attempt.
    modelTimeoutSeconds: 0.05,
    gets: { result: refused(modelFailure(MODEL_TIMED_OUT)), progress: [], kept: ["user"], ended: ["error"] },
  },
  {
    name: "error: the session database went away",
    message: "what is 3+3?",
    setup: (h) => failSecondAppend(h.store),
    gets: {
      result: refused(
        "Sorry, I could not finish: the session database sqlite:test is unavailable. " +
          `${RETRY.replace("a", "A")} once it is back.`,
      ),
      progress: ["1 step 1: 1 tool call(s)"],
      kept: ["user"],
      ended: ["error"],
      retried: {
        result: answered("The answer is 6.", [calculated("3+3")]),
        kept: ["user", "assistant", calculatorResult("3+3", 6), "assistant: The answer is 6."],
      },
    },
    // Only the turn's second write failed: the database is back.
    heal: () => {},
  },
  {
    name: "aborted: the client cancelled its ask",
    message: "hello",
    setup: (h) => (h.llm.hold = true),
    during: (_h, client) => client.abort(),
    // The SDK client rejects at once; the server sends nothing for a cancelled request.
    gets: {
      result: { rejected: "MCP error -32001: AbortError: The signal has been aborted" },
      progress: [],
      kept: [],
      ended: ["aborted"],
    },
  },
  {
    name: "aborted: the shutdown's grace period ended",
    message: "hello",
    setup: (h) => (h.llm.hold = true),
    during: (h) => h.shutdown.abort(),
    gets: {
      result: refused("The server is shutting down; retry elsewhere or later"),
      progress: [],
      kept: [],
      ended: ["aborted"],
    },
  },
  {
    name: "aborted: the lease was lost",
    message: "hello",
    setup: (h) => {
      const clock = new FakeClock();
      const leaky = leaseStoreWith(h.store, { renewLease: () => Promise.resolve(false) });
      h.deps.sessions = new SessionRunner({
        leases: new SessionLeases(leaky, { owner: "here", ttlMs: 30_000, clock }),
      });
      leaseClocks.set(h, clock);
      h.llm.hold = true;
    },
    // The first renewal, a third of the lease's time on, fails.
    during: (h) => leaseClocks.get(h)!.advance(10_000),
    gets: {
      result: refused(
        'Cannot finish the turn: this server lost the lease of session "s" (it stalled past ' +
          "AGENT_SESSION_LEASE_SECONDS); nothing of the turn was kept, send it again",
      ),
      progress: [],
      kept: [],
      ended: ["aborted"],
    },
  },
];

/** A harness serving `/mcp` to alice. */
function mcpHarness(): HttpHarness & { endpoint: McpEndpoint } {
  const h = httpHarness({ tokens: [{ token: TOKEN, userId: "alice" }] });
  const endpoint = new McpEndpoint();
  h.deps.mcp = endpoint;
  return Object.assign(h, { endpoint });
}

/** Text with what differs from run to run, the provider's loopback port, made alike. */
function alike(text: string): string {
  return text.replace(/127\.0\.0\.1:\d+/g, "127.0.0.1:…");
}

/** A connected SDK client of `/mcp`; with `elicit`, one that answers elicitation so, saying what it was asked. */
async function connect(h: HttpHarness, elicit: Outcome["elicit"], elicited: string[]) {
  const capabilities = elicit === undefined ? {} : { elicitation: {} };
  const client = new sdk.Client({ name: "test", version: "1.0.0" }, { capabilities });
  if (elicit !== undefined) {
    client.setRequestHandler(ElicitRequestSchema, (request: ElicitRequest) => {
      elicited.push(request.params.message);
      return { action: elicit };
    });
  }
  const transport = new sdk.StreamableHTTPClientTransport(new URL("http://agent.test/mcp"), {
    requestInit: { headers: { authorization: `Bearer ${TOKEN}` } },
    fetch: ((input, init) => h.handler(new Request(input, init))) as typeof fetch,
  });
  await client.connect(transport);
  return client;
}

/**
 * The tool result `asked` resolves to, its run id shown as "…" when it is the newest run's of the trace (any
 * other stays, to fail the comparison); or the message it rejects with.
 */
async function resultOf(asked: Promise<unknown>, h: HttpHarness | null): Promise<Seen["result"]> {
  let got: {
    content: { type: string; text: string }[];
    structuredContent?: Record<string, unknown>;
    isError?: boolean;
  };
  try {
    got = await asked as typeof got;
  } catch (error) {
    return { rejected: error instanceof Error ? error.message : String(error) };
  }
  assert.deepEqual(got.content.map((part) => part.type), ["text"]);
  let structured: Record<string, unknown> | null = got.structuredContent ?? null;
  if (structured !== null && h !== null && structured.run_id === runEnds(h).at(-1)?.runId) {
    structured = { ...structured, run_id: "…" };
  }
  return { isError: got.isError === true, text: alike(got.content[0].text), structured };
}

/** The run ends in the trace: each run's id and outcome. */
function runEnds(h: HttpHarness): { runId: string; outcome: string }[] {
  return Deno.readTextFileSync(h.tracePath).split("\n").filter((line) => line !== "")
    .map((line) => JSON.parse(line)).filter((event) => event.event === "run_end")
    .map((event) => ({ runId: event.run_id, outcome: event.data.outcome }));
}

/** The messages session "s" kept, as {@linkcode Seen.kept} shows them. */
async function keptIn(h: HttpHarness): Promise<string[]> {
  return (await h.store.messages(KEY)).map((m) =>
    m.role === "user" || !m.content ? m.role : `${m.role}: ${m.content}`
  );
}

/** Asks `outcome.message` on session "s" over `/mcp` with the model of `wire`, with a progress token or not. */
async function ask(outcome: Outcome, wire: Wire, withProgress: boolean): Promise<Seen> {
  using h = mcpHarness();
  const provider = wire === null ? null : ruleProvider(h.llm);
  const elicited: string[] = [];
  let client: Awaited<ReturnType<typeof connect>> | null = null;
  try {
    outcome.setup?.(h);
    if (wire !== null) {
      h.deps.agent.llm = provider!.model(wire.api, wire.stream, outcome.modelTimeoutSeconds);
    }
    client = await connect(h, outcome.elicit, elicited);
    const errors: unknown[] = [];
    // A progress notification with no token asked for, among others, would land here.
    client.onerror = (error: unknown) => errors.push(error);
    const progress: string[] = [];
    const cancel = new AbortController();
    const onprogress = (p: Progress) => progress.push(`${p.progress} ${p.message}`);
    const asked = client.callTool(
      { name: "ask", arguments: { message: outcome.message, session_id: KEY.sessionId } },
      undefined,
      { signal: cancel.signal, ...(withProgress ? { onprogress } : {}) },
    );
    if (outcome.during !== undefined) {
      await until(() => h.llm.calls === 1, "the model call");
      await outcome.during(h, cancel);
    }
    const result = await resultOf(asked, h);
    // A cancelled call's turn ends after the client stopped waiting: wait for it, let go of nothing before.
    await until(() => h.deps.sessions.active === 0, "the turn to end");
    const kept = await keptIn(h);
    const ended = runEnds(h).map((end) => end.outcome);
    const seen: Seen = { result, progress, kept, ended };
    if (outcome.elicit !== undefined) seen.elicited = elicited;
    if (outcome.heal !== undefined) {
      outcome.heal(h);
      const again = client.callTool({ name: "ask", arguments: { session_id: KEY.sessionId, retry: true } });
      seen.retried = { result: await resultOf(again, h), kept: [] };
      seen.retried.kept = await keptIn(h);
    }
    assert.deepEqual(errors, []);
    return seen;
  } finally {
    h.llm.release();
    await client?.close();
    await h.endpoint.close();
    await provider?.close();
  }
}

/** The name of the model of `wire`. */
function modelName(wire: Wire): string {
  return wire === null ? "in process" : `LLM_API=${wire.api} ${wire.stream ? "streamed" : "whole"}`;
}

for (const outcome of OUTCOMES) {
  Deno.test(`/mcp ask: a turn that ends "${outcome.name}" gives the client the same tool result from each model, with a progress token and without`, async () => {
    const seen: Record<string, Seen> = {};
    const expected: Record<string, Seen> = {};
    for (const wire of WIRES) {
      for (const withProgress of [true, false]) {
        const name = `${modelName(wire)}, ${withProgress ? "with" : "without"} a progress token`;
        seen[name] = await ask(outcome, wire, withProgress);
        const { gets } = outcome;
        const text = wire === null ? outcome.inProcessText : undefined;
        expected[name] = {
          ...gets,
          result: text === undefined ? gets.result : { ...gets.result, text },
          progress: withProgress ? gets.progress : [],
        };
      }
    }
    assert.deepEqual(seen, expected);
  });
}

Deno.test('/mcp ask with "retry" runs a session\'s unanswered message again, and refuses a retry it cannot run', async () => {
  using h = mcpHarness();
  const client = await connect(h, undefined, []);
  try {
    const call = async (args: Record<string, unknown>) => {
      const result = await resultOf(client.callTool({ name: "ask", arguments: args }), null);
      assert.ok("text" in result);
      return result;
    };
    assert.deepEqual(
      await call({ retry: true }),
      refused('Cannot retry: "session_id" must name the session whose message to run again'),
    );
    assert.deepEqual(
      await call({ session_id: "s", retry: "yes" }),
      refused('Cannot ask: "retry" must be a boolean'),
    );
    assert.deepEqual(
      await call({ session_id: "s", retry: true }),
      refused('Cannot retry: session "s" has no unanswered message (its last turn was answered)'),
    );
    assert.equal((await call({ session_id: "s", message: "hello" })).text, "echo: hello");
    assert.deepEqual(
      await call({ session_id: "s", retry: true }),
      refused('Cannot retry: session "s" has no unanswered message (its last turn was answered)'),
    );
    assert.deepEqual(await keptIn(h), ["user", "assistant: echo: hello"]);
  } finally {
    await client.close();
    await h.endpoint.close();
  }
});
