/**
 * `chat`: an interactive REPL on a terminal, one turn per input line when stdin is piped, or one turn for a
 * message given up front (one-shot). All drive the same `runTurn`; what they show comes from the run's events.
 * @module
 */
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import type { Agent } from "../agent/loop.ts";
import type { SessionRunner } from "../store/session_runner.ts";
import type { SessionKey } from "../store/store.ts";
import { askApprovals } from "./approval_prompt.ts";
import type { RunEvent } from "../events.ts";
import { parseResponseFormat } from "../agent/response_format.ts";
import { schemaProblems } from "../tools/json_schema.ts";
import type { ResponseFormat, TurnResult } from "../types.ts";
import {
  type ChatState,
  completeCommand,
  describeSession,
  isCommand,
  recordUsage,
  runCommand,
} from "./commands.ts";
import { LineEditor } from "./editor.ts";
import type { InputHistory } from "./history.ts";
import { createStyle, type Style } from "./render.ts";
import { TurnView } from "./turn_view.ts";

export { REPL_HELP } from "./commands.ts";

/** Options of {@linkcode runChat}. */
export interface ChatOptions {
  sessionId: string;
  userId: string;
  /** Everything `runTurn` needs except `emit` and `signal`, which the REPL supplies per turn. */
  deps: Agent;
  /** Forwards each event elsewhere as well (the trace). */
  emit: (event: RunEvent) => void;
  /** Typed or piped input; a terminal is put in raw mode while the REPL reads. */
  input: Readable;
  /** Answers go here. */
  output: Writable;
  /** Progress, tool calls and errors go here. */
  status: Writable;
  /** Interactive terminal mode: prompt, line editing, history, thinking indicator. */
  interactive: boolean;
  /**
   * One-shot: send this as the only turn, print its answer and return; `input` is not read.
   * @default {undefined}
   */
  message?: string;
  /**
   * Colour and bold on the terminal (NO_COLOR, --no-color and TERM=dumb turn it off).
   * @default {interactive}
   */
  color?: boolean;
  /**
   * The REPL's input history.
   * @default {an in-memory history}
   */
  history?: InputHistory;
  /**
   * The model in use, shown by `/model`.
   * @default {undefined}
   */
  model?: string;
  /**
   * Swaps the agent's model for the rest of the process (`/model <name>`); without it `/model` says it cannot.
   * @default {undefined}
   */
  setModel?: (name: string) => void;
  /**
   * The id of a session `/new` starts without one.
   * @default {a random "chat-" id}
   */
  newSessionId?: () => string;
  /**
   * The terminal's width, for rendering answers as markdown.
   * @default {80}
   */
  columns?: number;
  /**
   * Runs each turn under the session's lease, so the chat and a server (or another chat) on the same database
   * never interleave a session's turns. @default {new SessionRunner()} (no lease)
   */
  sessions?: SessionRunner;
  /**
   * What every answer must be (`--schema`): an answer is printed once checked; one still invalid after the
   * repair request ends the turn `invalid_output`, its errors on the status stream. @default {null}
   */
  responseFormat?: ResponseFormat | null;
}

/**
 * The response format of `--schema`: `text` is the JSON Schema read from `source` (a file, or `-` for stdin),
 * named after the file. Throws `TypeError` saying what is wrong: not JSON, or not a schema the runtime can
 * check answers against.
 */
export function schemaFormat(text: string, source: string): ResponseFormat {
  let schema: unknown;
  try {
    schema = JSON.parse(text);
  } catch (error) {
    throw new TypeError(`Cannot use --schema ${source}: it is not JSON (${(error as Error).message})`);
  }
  const problems = schemaProblems(schema);
  if (problems.length > 0) {
    const why = `it is not a JSON Schema the runtime can check answers against: ${problems.join("; ")}`;
    throw new TypeError(`Cannot use --schema ${source}: ${why}`);
  }
  const file = source === "-" ? "" : source.split(/[\\/]/).at(-1)!.replace(/\.json$/i, "");
  const name = file.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64) || "response";
  return parseResponseFormat({ type: "json_schema", json_schema: { name, schema } })!;
}

/**
 * The one-shot message from chat's words and, when one of them is `-`, the text piped in: the question, a
 * blank line, then the piped text (either alone when the other is empty). Words are joined by spaces.
 */
export function oneShotMessage(words: readonly string[], piped: string): string {
  const question = words.filter((word) => word !== "-").join(" ").trim();
  const attached = words.includes("-") && piped.trim() !== "" ? piped.replace(/\s+$/, "") : "";
  return question === "" ? attached : attached === "" ? question : `${question}\n\n${attached}`;
}

/** Whether a piped or one-shot turn failed, for the exit code: an error, or an answer not in the format. */
function failed(result: TurnResult | null): boolean {
  return result?.outcome === "error" || result?.outcome === "invalid_output" || result?.outcome === "timeout";
}

/**
 * Runs the chat until end of input or `/exit`. Resolves to the process exit code: 0, or 1 when stdin was
 * piped (or the one-shot message was sent) and a turn ended in error, `invalid_output` or passed its deadline,
 * so scripts notice.
 */
export async function runChat(options: ChatOptions): Promise<number> {
  const { interactive, color = interactive, output, status, emit, deps, sessionId, userId } = options;
  const style = createStyle(color);
  const { columns, sessions, responseFormat = null } = options;
  const view = new TurnView({ output, status, style, interactive, emit, columns, sessions });
  if (options.message !== undefined) {
    const result = await view.run(
      { sessionId, userId, message: options.message, responseFormat },
      deps,
      new AbortController().signal,
    );
    return failed(result) ? 1 : 0;
  }
  return interactive ? await repl(options, view, style) : await piped(options, view);
}

/** Whether a turn failed, for the exit code: it ended in error, or passed its deadline (nothing kept). */
/**
 * Settles the session's turn that waits for approval, if any: asks about each waiting call and resumes the
 * run, until nothing waits. False when input ended first (the turn keeps waiting, stored).
 */
async function settleApprovals(
  view: TurnView,
  deps: Agent,
  key: SessionKey,
  ask: (question: string) => Promise<string | null>,
  allowed: Set<string>,
  signal: () => AbortSignal,
): Promise<boolean> {
  for (;;) {
    const pending = await deps.store.pendingStep(key);
    if (pending === null) return true;
    const decisions = await askApprovals(pending, ask, allowed);
    if (decisions === null) return false;
    await view.run({ ...key, decisions }, deps, signal(), allowed);
  }
}

async function piped(options: ChatOptions, view: TurnView): Promise<number> {
  const { sessionId, userId, deps, output, responseFormat = null } = options;
  const lines = createInterface({ input: options.input, terminal: false })[Symbol.asyncIterator]();
  const next = async () => {
    const line = await lines.next();
    return line.done ? null : line.value;
  };
  const ask = (question: string) => {
    output.write(`${question}\n`);
    return next();
  };
  const allowed = new Set<string>();
  const signal = () => new AbortController().signal;
  let anyFailed = false;
  // A turn left waiting (by an earlier run of the chat) is settled before anything new is sent.
  while (await settleApprovals(view, deps, { sessionId, userId }, ask, allowed, signal)) {
    const raw = await next();
    if (raw === null) break;
    const message = raw.trim();
    if (message === "") continue;
    const result = await view.run({ sessionId, userId, message, responseFormat }, deps, signal(), allowed);
    if (failed(result)) anyFailed = true;
  }
  return anyFailed ? 1 : 0;
}

async function repl(options: ChatOptions, view: TurnView, style: Style): Promise<number> {
  const { userId, deps, output } = options;
  const state: ChatState = { sessionId: options.sessionId, userId, lastTurn: null };
  if (options.model !== undefined) state.model = options.model;
  const banner = await describeSession(deps.store, state.sessionId, userId);
  const editor = new LineEditor(options.input, output, {
    style,
    ...(options.history ? { history: options.history } : {}),
    complete: (line) => completeCommand(line, deps.store, userId),
  });
  let current: AbortController | null = null;
  editor.onInterrupt(() => current?.abort());
  editor.start();
  output.write(style.dim(`mini-runtime-agent — ${banner}. /help for commands.`) + "\n");
  const context = {
    state,
    store: deps.store,
    tools: deps.tools,
    prices: deps.prices,
    write: (text: string) => output.write(`${text}\n`),
    clearScreen: () => editor.clearScreen(),
    ...(options.setModel ? { setModel: options.setModel } : {}),
    newSessionId: options.newSessionId ?? (() => `chat-${crypto.randomUUID().slice(0, 8)}`),
  };
  const allowed = new Map<string, Set<string>>();
  const allowedIn = (sessionId: string) =>
    allowed.get(sessionId) ?? allowed.set(sessionId, new Set()).get(sessionId)!;
  const ask = async (question: string) => {
    output.write(`${question}\n`);
    const read = await editor.read();
    return read.kind === "exit" ? null : read.text;
  };
  const settle = async () => {
    const { sessionId } = state;
    return await settleApprovals(view, deps, { sessionId, userId }, ask, allowedIn(sessionId), () => {
      current = new AbortController();
      return current.signal;
    });
  };
  try {
    for (;;) {
      if (!await settle()) break;
      const read = await editor.read();
      if (read.kind === "exit") break;
      const text = read.text.trim();
      if (text === "") continue;
      const command = isCommand(text) ? await runCommand(text, context) : null;
      if (command === "exit") break;
      if (command === "done") continue;
      const { sessionId } = state;
      const responseFormat = options.responseFormat ?? null;
      const input = command === "retry"
        ? { sessionId, userId, retry: true, responseFormat }
        : { sessionId, userId, message: text, responseFormat };
      current = new AbortController();
      try {
        const result = await view.run(input, deps, current.signal, allowedIn(sessionId));
        if (result !== null) recordUsage(state, result.usage);
      } finally {
        current = null;
      }
    }
  } finally {
    editor.close();
  }
  return 0;
}
