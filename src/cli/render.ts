/**
 * How run events look on a terminal: the REPL's one view of the event stream.
 * @module
 */
import type { RunEvent } from "../events.ts";
import { shorten } from "../shorten.ts";

/** ANSI styling that turns itself off when colour is not wanted: then every method returns its text. */
export interface Style {
  dim(text: string): string;
  bold(text: string): string;
  red(text: string): string;
  italic(text: string): string;
  underline(text: string): string;
  /** Inline code in running text. */
  code(text: string): string;
  /** One line inside a fenced code block. */
  codeBlock(text: string): string;
  /** The text of a markdown heading. */
  heading(text: string): string;
}

/**
 * Styles for a terminal (`color: true`) or for plain output. Each styled text ends with a full reset, so a
 * caller nesting styles re-applies the outer ones after an inner piece (as `renderMarkdown` does).
 */
export function createStyle(color: boolean): Style {
  const wrap = (code: string) => (text: string) => color ? `\x1b[${code}m${text}\x1b[0m` : text;
  return {
    dim: wrap("2"),
    bold: wrap("1"),
    red: wrap("31"),
    italic: wrap("3"),
    underline: wrap("4"),
    code: wrap("36"),
    codeBlock: wrap("33"),
    heading: wrap("1;35"),
  };
}

/** What `colorWanted` decides from. */
export interface ColorOptions {
  /** `--no-color` was given. @default false */
  noColorFlag?: boolean;
  /** The environment variables that matter (`NO_COLOR`, `TERM`). */
  env: { NO_COLOR?: string; TERM?: string };
  /** The output is a terminal. */
  isTerminal: boolean;
}

/**
 * Whether output should be coloured: only on a terminal, and not when `--no-color` was given, `TERM=dumb`,
 * or `NO_COLOR` is set to any value (even empty: setting it at all is the user's request).
 */
export function colorWanted(options: ColorOptions): boolean {
  const { noColorFlag = false, env, isTerminal } = options;
  return isTerminal && !noColorFlag && env.NO_COLOR === undefined && env.TERM !== "dumb";
}

/** What `statsLine` reports about one answer. Token counts are null when the provider gave no usage. */
export interface AnswerStats {
  ms: number;
  modelCalls: number;
  toolCalls: number;
  tokensIn: number | null;
  tokensOut: number | null;
}

/** `n` and its noun, plural unless `n` is 1: `1 turn`, `1,250 tokens`. */
export function plural(n: number, noun: string): string {
  return `${n.toLocaleString("en-US")} ${noun}${n === 1 ? "" : "s"}`;
}

function duration(ms: number): string {
  if (!(ms >= 0)) ms = 0;
  // Bounds are where rounding would show "1000 ms" or "60.0 s".
  if (ms < 999.5) return `${Math.round(ms)} ms`;
  if (ms < 59_950) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/**
 * The dim line shown after an answer, e.g. `1.2 s · 2 model calls · 1 tool call · 310 → 24 tokens`.
 * Tool calls are left out when there were none; tokens when the provider did not report both counts.
 */
export function statsLine(stats: AnswerStats, style: Style): string {
  const { ms, modelCalls, toolCalls, tokensIn, tokensOut } = stats;
  const number = (n: number) => n.toLocaleString("en-US");
  const parts = [duration(ms), plural(modelCalls, "model call")];
  if (toolCalls > 0) parts.push(plural(toolCalls, "tool call"));
  if (tokensIn !== null && tokensOut !== null) {
    parts.push(`${number(tokensIn)} → ${number(tokensOut)} tokens`);
  }
  return style.dim(parts.join(" · "));
}

function short(text: string, max: number): string {
  return shorten(text, max, { oneLine: true, withinMax: true });
}

/** The line shown for an event, or null for events the REPL does not show. */
export function renderEvent(event: RunEvent, style: Style): string | null {
  switch (event.event) {
    case "tool_call":
      return style.dim(`  ↳ ${event.data.name}(${short(event.data.arguments, 120)})`);
    case "tool_result": {
      const { ok, data, error } = event.data;
      const detail = ok ? short(JSON.stringify(data), 120) : `error: ${short(String(error), 160)}`;
      return style.dim(`    ${ok ? "✓" : "✗"} ${detail}`);
    }
    case "tool_recovered": {
      const { name, decision, ok, error } = event.data;
      const what = decision === "ran_again"
        ? `ran again (safe to repeat)${ok ? "" : `: error: ${short(String(error), 160)}`}`
        : "interrupted by a stop, not run again";
      return style.dim(`  ↻ ${name}, left running by a stopped process: ${what}`);
    }
    case "compact": {
      const data = event.data;
      if (!data.ok) return style.dim(`    ⟳ compaction skipped: ${data.reason}`);
      const turns = data.turns_removed === 1 ? "1 turn" : `${data.turns_removed} turns`;
      return style.dim(
        `    ⟳ compacted ${turns} (${data.messages_removed} messages) into the summary; ` +
          `request estimate ${data.tokens_before} → ${data.tokens_after} tokens`,
      );
    }
    case "memory_write": {
      const { source, added, evicted, removed = 0 } = event.data;
      if (source === "forget") return style.dim(`    ⌫ forgot ${plural(removed, "memory item")}`);
      const left = evicted > 0 ? `; ${evicted} least recently used left` : "";
      return style.dim(`    ✎ memory: ${plural(added, "new item")} from the ${source}${left}`);
    }
    case "output_invalid": {
      const { errors, repair } = event.data;
      if (!repair) return invalidOutputText(errors, style);
      const what = errors.length === 1 ? "1 error" : `${errors.length} errors`;
      return style.dim(`  ✗ the answer does not match the response format (${what}); asking once more`);
    }
    case "error":
      // A cancelled turn is said once, by the REPL's own "cancelled" line; a failed one by its error line.
      if (event.data.kind !== "deadline") return null;
      return style.red(`  ! ${event.data.message}`);
    default:
      return null;
  }
}

/** The lines that say an answer is still not in the response format (`--schema`): each error on its own. */
export function invalidOutputText(errors: readonly string[], style: Style): string {
  const lines = errors.map((error) => `    - ${short(error, 200)}`);
  return style.red(
    ["  ! the answer does not match the response format, even after a repair request:", ...lines].join("\n"),
  );
}
