/**
 * `chat`: an interactive REPL on a terminal, or one turn per input line when stdin is piped. Both drive the
 * same `runTurn`; what they show comes from the run's events.
 * @module
 */
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { SessionError } from "../errors.ts";
import { type Agent, runTurn } from "../agent/loop.ts";
import type { SessionStore } from "../store/store.ts";
import type { RunEvent } from "../events.ts";
import type { TurnResult } from "../types.ts";
import { createStyle, renderEvent, type Style } from "./render.ts";

/** The REPL's own commands. */
export const REPL_HELP = `Commands:
  /help      show this help
  /session   show the session id, user and turn count
  /todos     list this session's todos
  /retry     run the last unanswered message again (after an error), without sending it twice
  /exit      leave (Ctrl-D works too; Ctrl-C cancels a running turn, or leaves at the prompt)`;

/** Options of {@linkcode runChat}. */
export interface ChatOptions {
  sessionId: string;
  userId: string;
  /** Everything `runTurn` needs except `emit` and `signal`, which the REPL supplies per turn. */
  deps: Agent;
  /** Forwards each event elsewhere as well (the trace). */
  emit: (event: RunEvent) => void;
  /** @default {process.stdin} */
  input: Readable;
  /** Answers go here. */
  output: Writable;
  /** Progress, tool calls and errors go here. */
  status: Writable;
  /** Interactive terminal mode: prompt, line editing, history, thinking indicator, colour. */
  interactive: boolean;
}

const SPINNER = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/** A "thinking…" line on the status stream, cleared before anything else is written. */
class Thinking {
  #out: Writable;
  #style: Style;
  #timer: ReturnType<typeof setInterval> | undefined;
  #frame = 0;

  constructor(out: Writable, style: Style) {
    this.#out = out;
    this.#style = style;
  }

  start(): void {
    if (this.#timer !== undefined) return;
    this.#draw();
    this.#timer = setInterval(() => this.#draw(), 100);
  }

  stop(): void {
    if (this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#out.write("\r\x1b[2K");
  }

  #draw(): void {
    this.#out.write(`\r\x1b[2K${this.#style.dim(`${SPINNER[this.#frame++ % SPINNER.length]} thinking…`)}`);
  }
}

async function describeSession(store: SessionStore, sessionId: string, userId: string): Promise<string> {
  const session = await store.get({ userId, sessionId });
  const turns = session?.turnCount ?? 0;
  return `session ${sessionId} (user ${userId}), ${turns} ${turns === 1 ? "turn" : "turns"}`;
}

async function describeTodos(store: SessionStore, sessionId: string, userId: string): Promise<string> {
  const todos = await store.listTodos({ userId, sessionId });
  if (todos.length === 0) return "no todos in this session";
  return todos.map((t) => `  ${t.completed ? "[x]" : "[ ]"} ${t.id}. ${t.text}`).join("\n");
}

/**
 * Runs the chat until end of input or `/exit`. Resolves to the process exit code: 0, or 1 when stdin was
 * piped and some turn ended in error (so scripts notice).
 */
export async function runChat(options: ChatOptions): Promise<number> {
  const { sessionId, userId, deps, emit, input, output, status, interactive } = options;
  const style = createStyle(interactive);
  // Read before the line reader exists: lines typed meanwhile would otherwise be lost.
  const banner = interactive ? await describeSession(deps.store, sessionId, userId) : "";
  const thinking = new Thinking(status, style);
  const rl = createInterface({
    input,
    output: interactive ? output : undefined,
    terminal: interactive,
    historySize: 200,
  });
  let current: AbortController | null = null;
  let failed = false;
  let closed = false;
  rl.on("SIGINT", () => {
    if (current !== null) current.abort();
    else rl.close();
  });
  // Piped input closes as soon as it is read; the lines still buffered are served before the loop ends.
  rl.on("close", () => {
    if (interactive) closed = true;
  });

  // True while streamed answer text is on the current output line.
  let streaming = false;
  const endStreamLine = () => {
    if (streaming) output.write("\n");
    streaming = false;
  };
  const onDelta = (text: string): void => {
    if (!streaming) {
      thinking.stop();
      if (interactive) output.write(`${style.bold("agent>")} `);
      streaming = true;
    }
    output.write(text);
  };

  const show = (event: RunEvent): void => {
    emit(event);
    // Text streamed alongside tool calls is finished before the tool lines appear.
    if (event.event === "tool_call") endStreamLine();
    if (!interactive) return;
    const line = renderEvent(event, style);
    if (line === null) return;
    thinking.stop();
    status.write(line + "\n");
    if (event.event === "tool_result") thinking.start();
  };

  if (interactive) {
    output.write(
      style.dim(
        `mini-runtime-agent — ${banner}. /help for commands.\n`,
      ),
    );
    rl.setPrompt(style.bold("you> "));
    rl.prompt();
  }
  for await (const raw of rl) {
    const line = raw.trim();
    if (line === "") {
      if (interactive) rl.prompt();
      continue;
    }
    const retry = interactive && line === "/retry";
    if (interactive && line.startsWith("/") && !retry) {
      if (line === "/exit" || line === "/quit") break;
      if (line === "/help") output.write(REPL_HELP + "\n");
      else if (line === "/session") output.write(await describeSession(deps.store, sessionId, userId) + "\n");
      else if (line === "/todos") output.write(await describeTodos(deps.store, sessionId, userId) + "\n");
      else output.write(`Unknown command ${line}. ${REPL_HELP}\n`);
      rl.prompt();
      continue;
    }
    current = new AbortController();
    if (interactive) thinking.start();
    let result: TurnResult | null = null;
    try {
      const input = retry ? { sessionId, userId, retry } : { sessionId, userId, message: line };
      result = await runTurn(input, deps, { emit: show, signal: current.signal, onDelta });
    } catch (error) {
      // Nothing to retry is an answer to the command, not a failure of the REPL.
      if (!(error instanceof SessionError && error.reason === "nothing_to_retry")) throw error;
      output.write(`${style.dim(error.message)}\n`);
    } finally {
      thinking.stop();
      current = null;
    }
    if (result === null) {
      rl.prompt();
      continue;
    }
    if (result.outcome === "error") failed = true;
    const shown = streaming && result.outcome === "answered";
    endStreamLine();
    // A streamed answer is already on screen, as it arrived; anything else is printed whole.
    if (interactive && result.outcome === "aborted") output.write(`${style.dim("cancelled")}\n`);
    else if (!shown) {
      output.write(interactive ? `${style.bold("agent>")} ${result.answer}\n` : `${result.answer}\n`);
    }
    if (closed) break;
    if (interactive) rl.prompt();
  }
  rl.close();
  return !interactive && failed ? 1 : 0;
}
