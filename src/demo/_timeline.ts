/**
 * The demo's trace timeline: one fixed-width line per run event, read back from the JSONL file.
 * @module
 */
import type { TracedEvent } from "../events.ts";

function tokensOf(event: TracedEvent): string | null {
  const d = event.data;
  if (event.event === "llm_call") {
    return d.prompt_tokens === null ? null : `${d.prompt_tokens}+${d.completion_tokens}`;
  }
  if (event.event === "compact") return d.ok === true ? `${d.tokens_before}→${d.tokens_after}` : null;
  if (event.event === "run_end") {
    const total = (d.usage as { total_tokens?: number | null } | undefined)?.total_tokens;
    return total === null || total === undefined ? null : `${total} total`;
  }
  return null;
}

function outcomeOf(event: TracedEvent): string | null {
  const d = event.data;
  switch (event.event) {
    case "run_end":
      return String(d.outcome);
    case "tool_result":
      return d.ok ? "ok" : `error: ${d.error}`;
    case "compact":
      return d.ok ? `ok, ${d.turns_removed} turn(s) into summary` : `failed: ${d.reason}`;
    case "llm_call":
      return Number(d.tool_call_count) > 0 ? `${d.tool_call_count} tool call(s)` : "text";
    case "answer":
      return JSON.stringify(d.text);
    case "error":
      return `${d.kind}: ${d.message}`;
    default:
      return null;
  }
}

/** The timeline's columns: title, width, alignment and what each shows for an event. */
const TIMELINE: readonly {
  title: string;
  width: number;
  right?: boolean;
  value: (event: TracedEvent, start: number) => unknown;
}[] = [
  { title: "+ms", width: 6, right: true, value: (e, start) => Date.parse(e.ts) - start },
  { title: "run", width: 8, value: (e) => e.run_id.slice(0, 8) },
  { title: "session", width: 15, value: (e) => e.session_id },
  { title: "turn", width: 4, right: true, value: (e) => e.turn },
  { title: "event", width: 11, value: (e) => e.event },
  { title: "step", width: 4, right: true, value: (e) => e.step },
  { title: "tool", width: 11, value: (e) => e.event.startsWith("tool_") ? e.data.name : null },
  {
    title: "latency",
    width: 7,
    right: true,
    value: (e) => typeof e.data.latency_ms === "number" ? `${e.data.latency_ms}ms` : null,
  },
  { title: "tokens", width: 11, value: tokensOf },
  { title: "outcome", width: 60, value: outcomeOf },
];

/** One timeline line: each value cut or padded to its column ("-" for none). */
function timelineRow(values: readonly unknown[]): string {
  const cells = TIMELINE.map(({ width, right }, i) => {
    const value = values[i];
    const text = value === null || value === undefined ? "-" : String(value);
    const cut = text.length > width ? `${text.slice(0, width - 1)}…` : text;
    return right ? cut.padStart(width) : cut.padEnd(width);
  });
  return `  ${cells.join("  ")}`.trimEnd();
}

/** The timeline's column titles. */
export function timelineHeader(): string {
  return timelineRow(TIMELINE.map((c) => c.title));
}

/** The timeline line for `event`, its time shown as milliseconds since `start`. */
export function timelineLine(event: TracedEvent, start: number): string {
  return timelineRow(TIMELINE.map((c) => c.value(event, start)));
}
