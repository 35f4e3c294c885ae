/** The demo's trace timeline: one fixed-width line per run event, read back from the JSONL file. @module */
import type { TracedEvent } from "../events.ts";

type Data = TracedEvent["data"];
type ByEvent<T> = Partial<Record<TracedEvent["event"], (d: Data) => T>>;

function usageTotal(d: Data): number | null {
  return (d.usage as { total_tokens?: number | null } | undefined)?.total_tokens ?? null;
}

/** The tokens column, by event: prompt+completion, the compaction's before→after, a run's total. */
const TOKENS: ByEvent<string | null> = {
  llm_call: (d) => d.prompt_tokens === null ? null : `${d.prompt_tokens}+${d.completion_tokens}`,
  compact: (d) => d.ok === true ? `${d.tokens_before}→${d.tokens_after}` : null,
  run_end: (d) => usageTotal(d) === null ? null : `${usageTotal(d)} total`,
};

/** The outcome column, by event. */
const OUTCOMES: ByEvent<string> = {
  run_end: (d) => String(d.outcome),
  tool_result: (d) => d.ok ? "ok" : `error: ${d.error}`,
  compact: (d) => d.ok ? `ok, ${d.turns_removed} turn(s) into summary` : `failed: ${d.reason}`,
  llm_call: (d) => Number(d.tool_call_count) > 0 ? `${d.tool_call_count} tool call(s)` : "text",
  answer: (d) => JSON.stringify(d.text),
  error: (d) => `${d.kind}: ${d.message}`,
};

function milliseconds(value: unknown): string | null {
  return typeof value === "number" ? `${value}ms` : null;
}

/** The timeline's columns: title, width, alignment and what each shows for an event. */
interface Column {
  title: string;
  width: number;
  right?: boolean;
  value(e: TracedEvent, start: number): unknown;
}
const TIMELINE: readonly Column[] = [
  { title: "+ms", width: 6, right: true, value: (e, start) => Date.parse(e.ts) - start },
  { title: "run", width: 8, value: (e) => e.run_id.slice(0, 8) },
  { title: "session", width: 15, value: (e) => e.session_id },
  { title: "turn", width: 4, right: true, value: (e) => e.turn },
  { title: "event", width: 11, value: (e) => e.event },
  { title: "step", width: 4, right: true, value: (e) => e.step },
  { title: "tool", width: 11, value: (e) => e.event.startsWith("tool_") ? e.data.name : null },
  { title: "latency", width: 7, right: true, value: (e) => milliseconds(e.data.latency_ms) },
  { title: "tokens", width: 11, value: (e) => TOKENS[e.event]?.(e.data) },
  { title: "outcome", width: 60, value: (e) => OUTCOMES[e.event]?.(e.data) },
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
