/**
 * `chat`: an interactive REPL on a terminal, one turn per input line when stdin is piped, or one turn for a
 * message given up front (one-shot). All drive the same `runTurn`; what they show comes from the run's events.
 * @module
 */
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import type { Agent } from "../agent/loop.ts";
import type { SessionKey, SessionStore } from "../store/store.ts";
import { APPROVAL_PROMPT, askApprovals } from "./approval_prompt.ts";
import { approvalCalls } from "../approval/decisions.ts";
import { parseResponseFormat } from "../agent/response_format.ts";
import { schemaProblems } from "../tools/json_schema.ts";
import type { ResponseFormat, TurnResult } from "../types.ts";
import {
  type ChatState,
  type CommandContext,
  completeCommand,
  describeSession,
  isCommand,
  recordUsage,
  runCommand,
} from "./commands.ts";
import { freshSessionId } from "./last_session.ts";
import { LineEditor, type LineEditorOptions } from "./editor.ts";
import { createStyle, type Style } from "./render.ts";
import { TurnView, type TurnViewOptions } from "./turn_view.ts";

/** Options of {@linkcode runChat}: those of its {@linkcode TurnView} and line editor, and the chat's own. */
export interface ChatOptions
  extends
    Pick<TurnViewOptions, "output" | "status" | "interactive" | "emit" | "columns" | "sessions">,
    Pick<LineEditorOptions, "history"> {
  sessionId: string;
  userId: string;
  /** Everything `runTurn` needs except `emit` and `signal`, which the REPL supplies per turn. */
  deps: Agent;
  /** Where the sessions are kept: the turns' store, and what the commands list and show. */
  store: SessionStore;
  /** Typed or piped input; a terminal is put in raw mode while the REPL reads. */
  input: Readable;
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
   * @default {freshSessionId}
   */
  newSessionId?: () => string;
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

/** The exit code of a piped or one-shot run whose last turn still waits for the user's approval. */
export const AWAITING_APPROVAL_EXIT = 3;

/** The status line of a piped or one-shot run that ends while a turn waits: which tools, where to decide. */
function waitingLine(names: readonly string[], sessionId: string, style: Style): string {
  const tools = [...new Set(names)].join(", ");
  return style.red(
    `! waiting for your approval to run ${tools}: approve or deny in deno task chat --session ${sessionId}, ` +
      `on the web page or with POST /v1/sessions/${sessionId}/approvals`,
  ) + "\n";
}

/**
 * Runs the chat until end of input or `/exit`. Resolves to the process exit code: 0, or 1 when stdin was
 * piped (or the one-shot message was sent) and a turn ended in error, `invalid_output` or passed its deadline,
 * or {@linkcode AWAITING_APPROVAL_EXIT} (3) when the run ends with a turn waiting for approval, so scripts
 * notice.
 */
export async function runChat(options: ChatOptions): Promise<number> {
  const { interactive, color = interactive, deps, sessionId, userId, responseFormat = null } = options;
  const style = createStyle(color);
  // Out of the REPL, a failed question is sent again from the REPL of its session.
  const retryHint = interactive
    ? "/retry sends it again"
    : `/retry in deno task chat --session ${sessionId} sends it again`;
  const view = new TurnView({ ...options, style, retryHint });
  if (options.message !== undefined) {
    const result = await view.run(
      { sessionId, userId, message: options.message, responseFormat },
      deps,
      new AbortController().signal,
    );
    if (result?.outcome === "awaiting_approval") {
      options.status.write(waitingLine(result.approval?.calls.map((c) => c.name) ?? [], sessionId, style));
      return AWAITING_APPROVAL_EXIT;
    }
    return failed(result) ? 1 : 0;
  }
  return interactive ? await repl(options, view, style) : await piped(options, view, style);
}

/** What REPL and piped input share: the session the next turn goes to, the commands, the allowed tools. */
class ChatRun {
  readonly state: ChatState;
  readonly commands: CommandContext;
  #allowed = new Map<string, Set<string>>();
  #options: ChatOptions;
  #view: TurnView;

  constructor(options: ChatOptions, view: TurnView, clearScreen: () => void) {
    const { userId, deps, output } = options;
    [this.#options, this.#view] = [options, view];
    this.state = { sessionId: options.sessionId, userId, lastTurn: null, model: options.model };
    this.commands = {
      state: this.state,
      store: options.store,
      tools: deps.tools,
      prices: deps.prices,
      write: (text: string) => output.write(`${text}\n`),
      clearScreen,
      ...(options.setModel ? { setModel: options.setModel } : {}),
      newSessionId: options.newSessionId ?? freshSessionId,
    };
  }

  get key(): SessionKey {
    return { sessionId: this.state.sessionId, userId: this.state.userId };
  }

  /** The tools the user allowed "always" in the current session. */
  get allowed(): Set<string> {
    const { sessionId } = this.state;
    return this.#allowed.get(sessionId) ?? this.#allowed.set(sessionId, new Set()).get(sessionId)!;
  }

  /**
   * Settles the session's turn that waits for approval, if any: asks about each waiting call (`ask` resolves
   * to null when input ended) and resumes the run, until nothing waits. False when input ended first (the turn
   * keeps waiting, stored).
   */
  async settle(
    ask: (question: string) => Promise<string | null>,
    signal: () => AbortSignal,
  ): Promise<boolean> {
    const { deps, store } = this.#options;
    for (;;) {
      const pending = await store.pendingStep(this.key);
      if (pending === null) return true;
      const decisions = await askApprovals(pending, ask, this.allowed);
      if (decisions === null) return false;
      await this.#view.run({ ...this.key, decisions }, deps, signal(), this.allowed);
    }
  }

  /**
   * Runs an entry: a command here (null: no turn ran; `exit`: leave), `/retry` or any other text as a turn of
   * the current session, under `signal()`.
   */
  async send(text: string, signal: () => AbortSignal): Promise<TurnResult | "exit" | null> {
    const command = isCommand(text) ? await runCommand(text, this.commands) : null;
    if (command === "exit") return "exit";
    if (command === "done") return null;
    const { deps, responseFormat = null } = this.#options;
    const turn = command === "retry" ? { ...this.key, retry: true } : { ...this.key, message: text };
    const result = await this.#view.run({ ...turn, responseFormat }, deps, signal(), this.allowed);
    if (result !== null) recordUsage(this.state, result.usage);
    return result;
  }
}

/**
 * One turn per piped line, in one session (which `/new` and `/switch` change); a line that is a command is
 * run as one, as in the REPL (`/clear` does nothing: there is no screen).
 */
async function piped(options: ChatOptions, view: TurnView, style: Style): Promise<number> {
  const run = new ChatRun(options, view, () => {});
  const lines = createInterface({ input: options.input, terminal: false })[Symbol.asyncIterator]();
  const next = async () => {
    const line = await lines.next();
    return line.done ? null : line.value;
  };
  // The output is the answers a script reads: the questions go to the status stream.
  const ask = (question: string) => {
    options.status.write(`${question}\n`);
    return next();
  };
  const signal = () => new AbortController().signal;
  let anyFailed = false;
  // A turn left waiting (by an earlier run of the chat) is settled before anything new is sent.
  while (await run.settle(ask, signal)) {
    const raw = await next();
    if (raw === null) return anyFailed ? 1 : 0;
    const text = raw.trim();
    if (text === "") continue;
    const result = await run.send(text, signal);
    if (result === "exit") return anyFailed ? 1 : 0;
    if (failed(result)) anyFailed = true;
  }
  // Input ended while a turn waits: it stays waiting, stored; say where to decide.
  const pending = await options.store.pendingStep(run.key);
  const names = pending === null ? [] : approvalCalls(pending).map((call) => call.name);
  options.status.write(waitingLine(names, run.state.sessionId, style));
  return AWAITING_APPROVAL_EXIT;
}

async function repl(options: ChatOptions, view: TurnView, style: Style): Promise<number> {
  const { userId, output } = options;
  const banner = await describeSession(options.store, { sessionId: options.sessionId, userId });
  const editor = new LineEditor(options.input, output, {
    style,
    ...(options.history ? { history: options.history } : {}),
    complete: (line) => completeCommand(line, options.store, userId),
  });
  const run = new ChatRun(options, view, () => editor.clearScreen());
  let current: AbortController | null = null;
  const signal = () => (current = new AbortController()).signal;
  editor.onInterrupt(() => current?.abort());
  editor.start();
  output.write(style.dim(`mini-runtime-agent — ${banner}. /help for commands.`) + "\n");
  const ask = async (question: string) => {
    output.write(`${question}\n`);
    const read = await editor.read(APPROVAL_PROMPT);
    return read.kind === "exit" ? null : read.text;
  };
  try {
    for (;;) {
      if (!await run.settle(ask, signal)) break;
      const read = await editor.read();
      if (read.kind === "exit") break;
      const text = read.text.trim();
      if (text === "") continue;
      try {
        if (await run.send(text, signal) === "exit") break;
      } finally {
        current = null;
      }
    }
  } finally {
    editor.close();
  }
  return 0;
}
