/**
 * One turn as the chat shows it: a "thinking…" line while the model works, tool calls as they run, the
 * answer streamed as it arrives (or printed whole). Piped, only the answer is shown, on one line per turn.
 * @module
 */
import type { Writable } from "node:stream";
import { errorMessage, SessionError } from "../errors.ts";
import type { Agent, TurnInput } from "../agent/loop.ts";
import type { RunEvent } from "../events.ts";
import { SessionRunner } from "../session/runner.ts";
import { queueTurn, type TurnDeps } from "../session/turn.ts";
import type { TurnFailure, TurnResult } from "../types.ts";
import { type MarkdownStream, markdownStream, renderMarkdown } from "./markdown.ts";
import { invalidOutputText, renderEvent, statsLine, type Style } from "./render.ts";

const SPINNER = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/** A "thinking…" line on the status stream, cleared before anything else is written. */
class Thinking {
  #out: Writable;
  #style: Style;
  #timer: ReturnType<typeof setInterval> | undefined;
  #frame = 0;
  #label = "thinking…";

  constructor(out: Writable, style: Style) {
    this.#out = out;
    this.#style = style;
  }

  /** Starts the line, saying `label` (the model is asked, or its reasoning streams in). */
  start(label = "thinking…"): void {
    if (this.#timer !== undefined && label === this.#label) return;
    this.#label = label;
    this.#draw();
    this.#timer ??= setInterval(() => this.#draw(), 100);
  }

  stop(): void {
    if (this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#out.write("\r\x1b[2K");
  }

  #draw(): void {
    this.#out.write(
      `\r\x1b[2K${this.#style.dim(`${SPINNER[this.#frame++ % SPINNER.length]} ${this.#label}`)}`,
    );
  }
}

/** Options of {@linkcode TurnView}. */
export interface TurnViewOptions {
  /** Where the turns read and write their sessions. */
  store: TurnDeps["store"];
  /** Answers go here. */
  output: Writable;
  /** Errors go here, and on a terminal progress and tool calls. */
  status: Writable;
  style: Style;
  /** A terminal: "agent>", the thinking line, tool calls, "cancelled" (and the chat's line editor). */
  interactive: boolean;
  /** Forwards each event elsewhere as well (the trace). */
  emit: (event: RunEvent) => void;
  /**
   * The terminal's width, for rendering answers as markdown (interactive only).
   * @default {80}
   */
  columns?: number;
  /**
   * Runs each turn under the session's lease when it has leases, so a turn never interleaves with another
   * process's (a server's, another chat's) on the same database; while the lease is busy the status says so.
   * @default {new SessionRunner()} (no lease)
   */
  sessions?: SessionRunner;
  /**
   * How to send a failed turn's saved question again, the end of its one error line on the status stream.
   * @default {"/retry sends it again"}
   */
  retryHint?: string;
}

/**
 * The one line a turn that ended in error gets on the status stream: what went wrong (an internal error only
 * by name: its details are in the trace), that the question is kept, and how to send it again.
 */
export function errorLine(failure: TurnFailure | undefined, retryHint: string): string {
  const what = failure === undefined || failure.kind === "internal"
    ? "an internal error occurred (details in the trace)"
    : failure.message;
  const saved = failure?.kind === "store" ? "" : "; your question is saved";
  return `! ${what}${saved}: ${retryHint}`;
}

/** Runs turns and shows them. */
export class TurnView {
  #options: TurnViewOptions;
  #sessions: SessionRunner;
  #thinking: Thinking;
  /** The streamed answer's markdown, on a terminal: set while its text is on the output. */
  #markdown: MarkdownStream | null = null;
  /** Model calls of the running turn, for its stats line. */
  #modelCalls = 0;
  /** Piped: the step whose streamed text is on the answer line (null: none yet this turn). */
  #pipedStep: number | null = null;
  /** Piped: the step of the turn's answer event (null: none yet this turn). */
  #answerStep: number | null = null;
  /** Piped: the line breaks that ended the streamed text, written only if more text of its step follows. */
  #heldBreaks = "";
  /** Piped: the last character written on the answer line ("" when none). */
  #lastChar = "";

  constructor(options: TurnViewOptions) {
    this.#options = options;
    this.#sessions = options.sessions ?? new SessionRunner();
    this.#thinking = new Thinking(options.status, options.style);
  }

  /**
   * Runs one turn (a new message, a retry, or decisions on the turn waiting for approval) and shows it; null
   * when there was nothing to retry or resume, or a turn waits for approval (said on the output). Any other
   * error of `queueTurn` or the turn is rethrown. `allowed`: tools the user allowed for the session.
   */
  async run(
    input: TurnInput,
    agent: Agent,
    signal: AbortSignal,
    allowed?: ReadonlySet<string>,
  ): Promise<TurnResult | null> {
    const { output, status, interactive, style, columns } = this.#options;
    if (interactive) this.#thinking.start();
    this.#modelCalls = 0;
    const started = performance.now();
    let result: TurnResult;
    const onWait = () => {
      this.#thinking.stop();
      status.write(`${style.dim(`waiting for session ${input.sessionId}, busy in another process…`)}\n`);
      if (interactive) this.#thinking.start();
    };
    const deps = { agent, store: this.#options.store, sessions: this.#sessions };
    try {
      const run = await queueTurn(signal, input, deps, { allowed, onWait });
      result = await run((event) => this.#show(event), {
        onDelta: (text, step) => interactive ? this.#delta(text) : this.#pipe(text, step),
        // Only the spinner's word changes: reasoning's text is never shown.
        onReasoning: () => {
          if (interactive && this.#markdown === null) this.#thinking.start("reasoning…");
        },
      });
    } catch (error) {
      // Nothing to retry is an answer to the command, not a failure of the REPL.
      const said = ["nothing_to_retry", "approval_pending", "no_pending_approval"];
      if (!(error instanceof SessionError && said.includes(error.reason))) throw error;
      output.write(`${style.dim(error.message)}\n`);
      return null;
    } finally {
      this.#thinking.stop();
    }
    // An error is said once, on the status stream, never as an answer.
    const error = result.outcome === "error"
      ? `${style.red(errorLine(result.failure, this.#options.retryHint ?? "/retry sends it again"))}\n`
      : "";
    if (!interactive) {
      this.#endPipedLine(result);
      // An answer not in the format is not printed: only a checked one reaches the output a script reads.
      if (result.outcome === "invalid_output") {
        status.write(`${invalidOutputText(result.failure?.errors ?? [], style)}\n`);
      }
      // The runtime's closing is on the output; why the turn stopped short goes where a script looks for it.
      if (result.outcome === "timeout" && result.failure !== undefined) {
        status.write(`${style.red(`! ${result.failure.message}`)}\n`);
      }
      status.write(error);
      return result;
    }
    const shown = this.#markdown !== null && result.outcome === "answered";
    this.#endStreamLine();
    // A streamed answer is already on screen, as it arrived; anything else is printed whole.
    if (result.outcome === "error") {
      status.write(error);
    } else if (result.outcome === "aborted") {
      const { failure } = result;
      const lost = failure?.kind === "lease" ? `: ${errorMessage(failure.cause)}` : "";
      output.write(`${style.dim(`cancelled${lost}`)}\n`);
    } else if (!shown && result.outcome !== "awaiting_approval") {
      // A turn that waits says nothing of its own: the calls and `[y/n/a]>` come next.
      output.write(`${style.bold("agent>")} ${renderMarkdown(result.answer, style, { columns })}\n`);
    }
    // A failed turn's line is its error: no stats line counting the calls that never answered.
    if (result.outcome !== "aborted" && result.outcome !== "error") {
      const { promptTokens: tokensIn, completionTokens: tokensOut } = result.usage;
      const stats = { ms: performance.now() - started, modelCalls: this.#modelCalls, tokensIn, tokensOut };
      output.write(`${statsLine({ ...stats, toolCalls: result.toolCalls.length }, style)}\n`);
    }
    return result;
  }

  /**
   * Piped: ends the turn's answer line (a turn that waits for approval leaves it to the resumed turn). Text
   * streamed before tool calls is already on it, so an answer that was
   * not streamed (a closing answer, an answer of a model that does not stream) continues the line rather than
   * starting another. An answer not in the response format, or an error, leaves its line empty; the status
   * says why (run).
   */
  #endPipedLine(result: TurnResult): void {
    const { output } = this.#options;
    // A turn that waits has no answer yet: its line is the resumed turn's (text streamed so far is ended).
    if (result.outcome === "awaiting_approval") {
      if (this.#pipedStep !== null) output.write("\n");
      this.#resetPipedLine();
      return;
    }
    const printable = result.outcome !== "invalid_output" && result.outcome !== "error";
    // Only the answer's own step streamed means it is on the line: text of an earlier step is not the answer.
    const streamed = this.#pipedStep !== null && this.#pipedStep === this.#answerStep;
    if (printable && !(streamed && result.outcome === "answered")) {
      output.write(`${this.#separator()}${result.answer}`);
    }
    output.write("\n");
    this.#resetPipedLine();
  }

  #resetPipedLine(): void {
    this.#pipedStep = null;
    this.#answerStep = null;
    this.#heldBreaks = "";
    this.#lastChar = "";
  }

  /** Piped: a space between text already on the answer line and what continues it, unless it ends in one. */
  #separator(): string {
    return this.#lastChar === "" || /\s/.test(this.#lastChar) ? "" : " ";
  }

  /**
   * Piped: writes streamed text as it arrives, on one line per turn. Text of a later step (the answer after
   * tool calls) continues the line after a space; the line breaks that ended the earlier step's text are
   * dropped, so the line stays one.
   */
  #pipe(text: string, step: number): void {
    let out = text;
    if (this.#pipedStep === step) out = this.#heldBreaks + out;
    else if (this.#pipedStep !== null) out = this.#separator() + out;
    this.#pipedStep = step;
    const kept = out.replace(/[\r\n]+$/, "");
    this.#heldBreaks = out.slice(kept.length);
    if (kept === "") return;
    this.#options.output.write(kept);
    this.#lastChar = kept.at(-1)!;
  }

  #endStreamLine(): void {
    this.#markdown?.end();
    this.#markdown = null;
  }

  /** On a terminal: the answer as markdown, redrawn line by line as it grows. */
  #delta(text: string): void {
    const { output, style, columns } = this.#options;
    if (this.#markdown === null) {
      this.#thinking.stop();
      const prefix = `${style.bold("agent>")} `;
      this.#markdown = markdownStream((chunk) => output.write(chunk), style, { columns, prefix });
    }
    this.#markdown.push(text);
  }

  #show(event: RunEvent): void {
    const { status, interactive, style, emit } = this.#options;
    emit(event);
    if (event.event === "llm_call") this.#modelCalls++;
    if (event.event === "answer") this.#answerStep = event.step;
    // Text streamed alongside tool calls is finished before the tool lines appear.
    if (event.event === "tool_call") this.#endStreamLine();
    if (!interactive) return;
    const line = renderEvent(event, style);
    if (line === null) return;
    this.#thinking.stop();
    status.write(line + "\n");
    if (event.event === "tool_result") this.#thinking.start();
  }
}
