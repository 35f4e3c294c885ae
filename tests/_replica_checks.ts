/**
 * What must hold when several processes served the same sessions: read from the trace (in the order the
 * events were appended) and from the sessions as stored. Each check returns one message per violation.
 */
import { isBackgroundEvent, type TracedEvent } from "../src/events.ts";
import type { Session } from "../src/store/store.ts";
import type { StoredMessage } from "../src/types.ts";

/** A turn a client got a 200 for: its session, its number and the message it sent. */
export interface Acknowledged {
  sessionId: string;
  turn: number;
  message: string;
}

function bySession(events: readonly TracedEvent[]): Map<string, TracedEvent[]> {
  const sessions = new Map<string, TracedEvent[]>();
  for (const event of events) {
    const name = `${event.user_id}/${event.session_id}`;
    sessions.set(name, [...sessions.get(name) ?? [], event]);
  }
  return sessions;
}

/**
 * Per session, in trace order: no event of one run between another run's `run_start` and `run_end` (a
 * background compaction's `compact` and `memory_write` belong to no turn and are left out), no turn number started twice, and every
 * run that started ended.
 */
export function traceProblems(events: readonly TracedEvent[]): string[] {
  const out: string[] = [];
  for (const [name, list] of bySession(events)) {
    let current: TracedEvent | null = null;
    const numbers = new Map<number, string>();
    const open = new Map<string, number>();
    for (const event of list) {
      if (event.event === "run_start") open.set(event.run_id, event.turn);
      if (event.event === "run_end") open.delete(event.run_id);
      if (isBackgroundEvent(event)) continue;
      if (event.event === "run_start") {
        if (current !== null) {
          out.push(`${name}: run ${event.run_id} (turn ${event.turn}) started inside run ${current.run_id}`);
        }
        const seen = numbers.get(event.turn);
        if (seen !== undefined) {
          out.push(`${name}: turn ${event.turn} started by runs ${seen} and ${event.run_id}`);
        }
        numbers.set(event.turn, event.run_id);
        current = event;
      } else if (current !== null && event.run_id !== current.run_id) {
        out.push(`${name}: ${event.event} of run ${event.run_id} inside run ${current.run_id}`);
      } else if (event.event === "run_end") {
        current = null;
      }
    }
    for (const [run, turn] of open) out.push(`${name}: run ${run} (turn ${turn}) has no run_end`);
  }
  return out;
}

/** The `compact` events that failed, as messages. */
export function compactionProblems(events: readonly TracedEvent[]): string[] {
  return events.filter((e) => e.event === "compact" && e.data.ok !== true)
    .map((e) => `${e.session_id}: compaction of turn ${e.turn} failed: ${e.data.reason}`);
}

/**
 * The stored messages as whole turns, `user (assistant-with-calls tool+)* assistant`, runtime nudges allowed
 * inside a turn: two turns' messages never mixed.
 */
export function wholeTurnProblems(sessionId: string, messages: readonly StoredMessage[]): string[] {
  const shape = messages.map((m) =>
    m.role === "user"
      ? "u"
      : m.role === "tool"
      ? "t"
      : m.role === "runtime"
      ? "r"
      : m.toolCalls?.length
      ? "c"
      : "a"
  ).join("");
  return /^(ur*(ct+r*)*a)*$/.test(shape)
    ? []
    : [`session ${sessionId}: messages are not whole turns: ${shape}`];
}

/**
 * Every acknowledged turn stored: its numbers are exactly 1…turn_count, and the user messages still stored
 * (the newest, not compacted) are those of the newest acknowledged turns, in order.
 */
export function acknowledgedProblems(
  session: Session,
  messages: readonly StoredMessage[],
  acknowledged: readonly Acknowledged[],
): string[] {
  const at = `session ${session.id}:`;
  const sorted = [...acknowledged].sort((a, b) => a.turn - b.turn);
  const numbers = sorted.map((a) => a.turn).join(",");
  const expected = Array.from({ length: session.turnCount }, (_, i) => i + 1).join(",");
  if (numbers !== expected) {
    return [`${at} acknowledged turns ${numbers} are not 1…${session.turnCount} (turn_count)`];
  }
  const stored = messages.filter((m) => m.role === "user").map((m) => m.content);
  const newest = sorted.slice(sorted.length - stored.length).map((a) => a.message);
  return JSON.stringify(stored) === JSON.stringify(newest) ? [] : [
    `${at} stored questions ${JSON.stringify(stored)} are not the newest acknowledged ${
      JSON.stringify(newest)
    }`,
  ];
}
