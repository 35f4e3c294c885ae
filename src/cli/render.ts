/**
 * How run events look on a terminal: the REPL's one view of the event stream.
 * @module
 */
import type { RunEvent } from "../events.ts";
import { shorten } from "../shorten.ts";

/** ANSI styling that turns itself off when colour is not wanted. */
export interface Style {
  dim(text: string): string;
  bold(text: string): string;
  red(text: string): string;
}

/** Styles for a terminal (`color: true`) or for plain output. */
export function createStyle(color: boolean): Style {
  const wrap = (code: string) => (text: string) => color ? `\x1b[${code}m${text}\x1b[0m` : text;
  return { dim: wrap("2"), bold: wrap("1"), red: wrap("31") };
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
    case "compact": {
      const data = event.data;
      if (!data.ok) return style.dim(`    ⟳ compaction skipped: ${data.reason}`);
      const turns = data.turns_removed === 1 ? "1 turn" : `${data.turns_removed} turns`;
      return style.dim(
        `    ⟳ compacted ${turns} (${data.messages_removed} messages) into the summary; ` +
          `request estimate ${data.tokens_before} → ${data.tokens_after} tokens`,
      );
    }
    case "error":
      // A cancelled turn is said once, by the REPL's own "cancelled" line.
      if (event.data.kind === "aborted") return null;
      return style.red(`  ! ${event.data.message}`);
    default:
      return null;
  }
}
