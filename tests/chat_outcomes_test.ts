/**
 * Every way a turn ends, as the chat shows it, piped (one turn per stdin line), one-shot and in the REPL: the
 * exit code, what is on stdout and what on the status stream (stderr). Each runs with the rule model in
 * process, then behind the real model client of each wire format (`LLM_API`), the model streamed and whole:
 * all seven show the user the same.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { parseResponseFormat, repairRequest } from "../src/agent/response_format.ts";
import { BUDGET_ANSWER, MAX_STEPS_ANSWER, TIMEOUT_ANSWER } from "../src/agent/loop.ts";
import { APPROVAL_PROMPT } from "../src/cli/approval_prompt.ts";
import { runChat } from "../src/cli/chat.ts";
import { LlmError } from "../src/errors.ts";
import { LLM_APIS, type LlmApi, type ResponseFormat } from "../src/types.ts";
import { FakeClock } from "./_fake_clock.ts";
import { failSecondAppend, type Harness, harness, textSink } from "./_harness.ts";
import { RuleLLM, until } from "./_http_harness.ts";
import { ruleProvider } from "./_rule_provider.ts";

/** What the user sees of a chat run: its exit code, its stdout and its status stream (stderr). */
interface Seen {
  code: number;
  stdout: string;
  status: string;
}

/** One way for a turn to end: how to set it up, what to ask, how to end it once it runs, what chat shows. */
interface Outcome {
  name: string;
  message: string;
  setup?: (h: Harness, llm: RuleLLM) => void;
  /** Runs once the model was called, while it is held; `input` is the chat's stdin. */
  during?: (h: Harness, input: PassThrough) => void | Promise<void>;
  /** Lines typed after the turn ended (answers to the approval question). @default {[]} */
  answers?: string[];
  responseFormat?: ResponseFormat | null;
  /** The deadline of a model client's attempt, in seconds, when the test needs a short one. @default {60} */
  modelTimeoutSeconds?: number;
  /** What each way of running chat shows, with every model (a mode left out cannot end a turn this way). */
  shows: Partial<Record<Mode, Seen>>;
  /**
   * What the rule model in process shows where it cannot say what a wire's client says (the provider's host).
   * @default {shows}
   */
  inProcess?: Partial<Record<Mode, Seen>>;
}

const SESSION = "chat-outcomes";
const RETRY = `/retry in deno task chat --session ${SESSION} sends it again`;
const BANNER = `mini-runtime-agent — session ${SESSION} (user u), 0 turns. /help for commands.`;
/** What a piped or one-shot run that ends with the turn waiting says on the status stream, before it exits 3. */
const WAITING =
  `! waiting for your approval to run calculator: approve or deny in deno task chat --session ${SESSION}, ` +
  `on the web page or with POST /v1/sessions/${SESSION}/approvals`;
const ASKED = 'Allow calculator {"expression":"2+2"}? [y]es / [n]o / [a]lways for this session ';
/**
 * The rule model's echo of the repair request, the answer that fails the format a second time, as the REPL
 * renders it: its list of errors as markdown.
 */
const REPAIR = repairRequest("echo: hello", ["$: the answer is not JSON (…)"]).replace(/^- /gm, "• ");

/** What piped and one-shot chat (no terminal) show alike, and what the REPL shows. */
function same(seen: Seen, repl?: Seen): Partial<Record<Mode, Seen>> {
  return { piped: seen, "one-shot": seen, ...(repl === undefined ? {} : { repl }) };
}

/** Options of {@linkcode repl}. */
interface ReplShown {
  /**
   * The lines on the status stream.
   * @default {[]}
   */
  status?: string[];
  /**
   * The prompt Ctrl-D leaves the REPL at.
   * @default {"you> "}
   */
  leftAt?: string;
}

/** What the REPL shows for `message` and the `lines` after it, left with Ctrl-D (exit 0). */
function repl(message: string, lines: string[], options: ReplShown = {}): Seen {
  const { status = [], leftAt = "you> " } = options;
  const shown = [BANNER, `you> ${message}`, ...lines, leftAt];
  return { code: 0, stdout: `${shown.join("\n")}\n`, status: status.map((line) => `${line}\n`).join("") };
}

/** The REPL's line under an answer, its duration aside: the rule model spends 10 → 2 tokens a call. */
function stats(modelCalls: number, toolCalls = 0): string {
  const parts = ["… ms", `${modelCalls} model call${modelCalls === 1 ? "" : "s"}`];
  if (toolCalls > 0) parts.push(`${toolCalls} tool call${toolCalls === 1 ? "" : "s"}`);
  if (modelCalls > 0) parts.push(`${10 * modelCalls} → ${2 * modelCalls} tokens`);
  return parts.join(" · ");
}

/** The REPL's status lines of a calculator call and its result. */
function calculated(expression: string, result: number): string[] {
  return [
    `  ↳ calculator({"expression":"${expression}"})`,
    `    ✓ {"expression":"${expression}","result":${result}}`,
  ];
}

const NOT_JSON = [
  "  ! the answer does not match the response format, even after a repair request:",
  "    - $: the answer is not JSON (…)",
];
const FAILED_500 =
  "! LLM request failed: HTTP 500 from 127.0.0.1:…: the provider is down; your question is saved";
const TIMED_OUT = "! LLM request timed out after 0.05 s; your question is saved";
const STORE_GONE = "! the session database sqlite:test is unavailable";

const OUTCOMES: Outcome[] = [
  {
    name: "answered",
    message: "hello",
    shows: same(
      { code: 0, stdout: "echo: hello\n", status: "" },
      repl("hello", ["agent> echo: hello", stats(1)]),
    ),
  },
  {
    name: "answered, with text written before a tool call",
    message: "what is 6*7?",
    setup: (_h, llm) => (llm.preamble = "Let me work that out."),
    shows: same(
      // Piped, the text before the call and the answer share the answer's one line.
      { code: 0, stdout: "Let me work that out. The answer is 42.\n", status: "" },
      repl(
        "what is 6*7?",
        ["agent> Let me work that out.", "agent> The answer is 42.", stats(2, 1)],
        { status: calculated("6*7", 42) },
      ),
    ),
  },
  {
    name: "max_steps",
    message: "what is 1+1?",
    setup: (h) => (h.agent.maxSteps = 1),
    shows: same(
      { code: 0, stdout: `${MAX_STEPS_ANSWER}\n`, status: "" },
      repl("what is 1+1?", [`agent> ${MAX_STEPS_ANSWER}`, stats(1, 1)], { status: calculated("1+1", 2) }),
    ),
  },
  {
    name: "budget",
    message: "hello",
    setup: (h) => (h.agent.maxTurnTokens = 1),
    shows: same(
      { code: 0, stdout: `${BUDGET_ANSWER}\n`, status: "" },
      repl("hello", [`agent> ${BUDGET_ANSWER}`, stats(0)]),
    ),
  },
  {
    name: "timeout",
    message: "hello",
    setup: (h, llm) => {
      h.agent.turnTimeoutSeconds = 30;
      h.agent.clock = new FakeClock();
      llm.hold = true;
    },
    during: (h) => (h.agent.clock as FakeClock).advance(30_000),
    shows: same(
      // Piped, the exit code says it failed and the status stream why.
      {
        code: 1,
        stdout: `${TIMEOUT_ANSWER}\n`,
        status: "! the turn was stopped: it passed its time limit of 30 s (AGENT_TURN_TIMEOUT_SECONDS)\n",
      },
      repl("hello", [`agent> ${TIMEOUT_ANSWER}`, stats(0)], {
        status: ["  ! the turn was stopped: it passed its time limit of 30 s (AGENT_TURN_TIMEOUT_SECONDS)"],
      }),
    ),
  },
  {
    name: "awaiting_approval, input ending before an answer",
    message: "what is 2+2?",
    setup: (h) => (h.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } })),
    shows: {
      // Piped, the chat asks the next line on the status stream, as a run that finds a turn waiting does; none
      // comes. Nothing reaches the output a script reads, and the exit code says the turn waits.
      piped: { code: 3, stdout: "", status: `${ASKED}\n${WAITING}\n` },
      "one-shot": { code: 3, stdout: "", status: `${WAITING}\n` },
      // The calls and the approval's prompt only; Ctrl-D there leaves the REPL, the turn still waiting.
      repl: repl("what is 2+2?", [stats(1), ASKED], { leftAt: APPROVAL_PROMPT }),
    },
  },
  {
    name: "awaiting_approval, then approved",
    message: "what is 2+2?",
    setup: (h) => (h.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } })),
    answers: ["y"],
    shows: {
      piped: { code: 0, stdout: "The answer is 4.\n", status: `${ASKED}\n` },
      repl: repl(
        "what is 2+2?",
        [stats(1), ASKED, `${APPROVAL_PROMPT}y`, "agent> The answer is 4.", stats(1, 1)],
        { status: calculated("2+2", 4) },
      ),
    },
  },
  {
    name: "invalid_output: the answer is not JSON, even after a repair request",
    message: "hello",
    responseFormat: parseResponseFormat({ type: "json_object" }),
    shows: same(
      // No answer where a script reads one: the errors are on the status stream.
      { code: 1, stdout: "\n", status: NOT_JSON.map((line) => `${line}\n`).join("") },
      // The REPL shows the answer that failed (here the echo of the repair request) above the errors.
      repl("hello", [`agent> echo: ${REPAIR}`, stats(2)], {
        status: [
          "  ✗ the answer does not match the response format (1 error); asking once more",
          ...NOT_JSON,
        ],
      }),
    ),
  },
  {
    name: "error: the model failed",
    message: "hello",
    setup: (_h, llm) => (llm.fail = new LlmError("the provider is down", { kind: "http", status: 500 })),
    shows: same(
      { code: 1, stdout: "\n", status: `${FAILED_500}: ${RETRY}\n` },
      repl("hello", [], { status: [`${FAILED_500}: /retry sends it again`] }),
    ),
    // In process, the rule model's error is what a client would have read from the provider.
    inProcess: same(
      { code: 1, stdout: "\n", status: `! the provider is down; your question is saved: ${RETRY}\n` },
      repl("hello", [], {
        status: ["! the provider is down; your question is saved: /retry sends it again"],
      }),
    ),
  },
  {
    name: "error: the model timed out",
    message: "hello",
    // Behind a wire, the reply never comes: the client's own deadline ends the attempt, saying this.
    setup: (_h, llm) => (llm.fail = new LlmError("LLM request timed out after 0.05 s", { kind: "timeout" })),
    modelTimeoutSeconds: 0.05,
    shows: same(
      { code: 1, stdout: "\n", status: `${TIMED_OUT}: ${RETRY}\n` },
      repl("hello", [], { status: [`${TIMED_OUT}: /retry sends it again`] }),
    ),
  },
  {
    name: "error: the session database went away",
    message: "what is 3+3?",
    setup: (h) => failSecondAppend(h.store),
    shows: same(
      { code: 1, stdout: "\n", status: `${STORE_GONE}: ${RETRY}\n` },
      repl("what is 3+3?", [], { status: [`${STORE_GONE}: /retry sends it again`] }),
    ),
  },
  {
    name: "aborted: Ctrl-C",
    message: "hello",
    setup: (_h, llm) => (llm.hold = true),
    during: (_h, input) => void input.write("\x03"),
    // Only the REPL cancels a turn: piped and one-shot chat have no key for it (a signal ends the process).
    shows: { repl: repl("hello", ["cancelled"]) },
  },
];

/** The model of a run: the rule model itself, or the rule model behind the wire of an `LLM_API`, streamed or whole. */
type Wire = { api: LlmApi; stream: boolean } | null;

const WIRES: Wire[] = [null, ...LLM_APIS.flatMap((api) => [{ api, stream: false }, { api, stream: true }])];

function wireName(wire: Wire): string {
  return wire === null
    ? "the rule model in process"
    : `LLM_API=${wire.api} ${wire.stream ? "streamed" : "whole"}`;
}

/** How chat is run: one turn per piped line, a one-shot message, or the REPL on a terminal. */
type Mode = "piped" | "one-shot" | "repl";

/**
 * What a person sees on a terminal: no ANSI escapes, no "thinking…" frames, each line as its last carriage
 * return left it; a stats line's duration (the one wall-clock reading) as `… ms`.
 */
function screen(text: string): string {
  const spinner = /[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] (thinking|reasoning)…/g;
  // deno-lint-ignore no-control-regex
  const bare = text.replace(/\x1b\[\??[0-9;]*[A-Za-z]/g, "").replace(spinner, "");
  return bare.split("\n").map((line) => line.replace(/\r+$/, "").split("\r").at(-1)!).join("\n")
    .replace(/^\d+(\.\d+)? (ms|s) · /gm, "… ms · ");
}

/**
 * Each run has its own provider: the loopback port in a message is the one difference. JSON.parse's words, the
 * engine's rather than chat's, are left out too.
 */
function normalised(seen: Seen): Seen {
  const plain = (text: string) =>
    text.replace(/127\.0\.0\.1:\d+/g, "127.0.0.1:…").replace(
      /the answer is not JSON \(.*\)$/gm,
      "the answer is not JSON (…)",
    );
  return { code: seen.code, stdout: plain(seen.stdout), status: plain(seen.status) };
}

/** Runs `outcome` through chat in `mode` with the model of `wire`: what the user saw. */
async function chatOutcome(outcome: Outcome, wire: Wire, mode: Mode): Promise<Seen> {
  using h = harness([]);
  const llm = new RuleLLM();
  h.agent.llm = llm;
  const provider = wire === null ? null : ruleProvider(llm);
  try {
    outcome.setup?.(h, llm);
    if (wire !== null) h.agent.llm = provider!.model(wire.api, wire.stream, outcome.modelTimeoutSeconds);
    const [input, output, status] = [new PassThrough(), textSink(), textSink()];
    const chat = runChat({
      sessionId: SESSION,
      userId: "u",
      deps: h.agent,
      store: h.store,
      emit: h.run.emit,
      input,
      output: output.stream,
      status: status.stream,
      interactive: mode === "repl",
      color: false,
      responseFormat: outcome.responseFormat ?? null,
      ...(mode === "one-shot" ? { message: outcome.message } : {}),
    });
    if (mode === "piped") {
      input.end([outcome.message, ...outcome.answers ?? []].map((l) => `${l}\n`).join(""));
    }
    if (mode === "one-shot") input.end();
    if (mode === "repl") input.write(`${outcome.message}\r`);
    if (outcome.during !== undefined) {
      await until(() => llm.calls === 1, "the model call");
      await outcome.during(h, input);
    }
    if (mode === "repl") {
      const ends = () => h.events.filter((e) => e.event === "run_end").length;
      await until(() => ends() === 1, "the turn's end");
      for (const answer of outcome.answers ?? []) input.write(`${answer}\r`);
      await until(() => ends() === 1 + (outcome.answers?.length ?? 0), "the resumed turn's end");
      input.write("\x04"); // Ctrl-D: leaves at the prompt, and at the approval's
    }
    const code = await chat;
    llm.release();
    const [stdout, said] = mode === "repl"
      ? [screen(output.text()), screen(status.text())]
      : [output.text(), status.text()];
    return normalised({ code, stdout, status: said });
  } finally {
    await provider?.close();
  }
}

for (const outcome of OUTCOMES) {
  for (const mode of ["piped", "one-shot", "repl"] as const) {
    if (!(mode in outcome.shows)) continue;
    const chat = mode === "repl" ? "the REPL" : `${mode} chat`;
    Deno.test(`${chat} shows a turn that ends "${outcome.name}" the same with every model, in process and behind each wire`, async () => {
      const seen: Record<string, Seen> = {};
      for (const wire of WIRES) seen[wireName(wire)] = await chatOutcome(outcome, wire, mode);
      const expected = (wire: Wire) =>
        (wire === null ? outcome.inProcess : undefined)?.[mode] ?? outcome.shows[mode];
      assert.deepEqual(seen, Object.fromEntries(WIRES.map((wire) => [wireName(wire), expected(wire)])));
    });
  }
}
