// @ts-check
/// <reference lib="dom" />
/**
 * A run as a timeline: one row per traced event on a shared time axis (model calls as bars with latency and
 * tokens, tool calls from their call to their result, compactions, errors, the answer) and the run's totals.
 * `buildTimeline` is pure, so it is tested without a browser.
 * @module
 */
import { formatCost } from "../text/cost.js";
import { clip, el } from "./dom.js";

/**
 * @typedef {{ ts: string, run_id: string, turn: number, event: string, step: number | null,
 *   data: Record<string, any> }} TraceEvent
 * @typedef {{ kind: string, label: string, detail: string, start: number, end: number, status: string,
 *   step: number | null }} TimelineRow
 * @typedef {{ runId: string, turn: number, message: string, outcome: string | null, durationMs: number,
 *   steps: number | null, toolCalls: number | null, tokens: number | null, cost: number | null | undefined,
 *   rows: TimelineRow[] }} Timeline
 */

/** @param {number | null | undefined} n */
function tokens(n) {
  return n === null || n === undefined ? "?" : String(n);
}

/**
 * The timeline of one run's events (oldest first); times are milliseconds from the run's start. Pure.
 * @param {TraceEvent[]} events
 * @returns {Timeline}
 */
export function buildTimeline(events) {
  const t0 = events.length === 0 ? 0 : Math.min(...events.map((e) => Date.parse(e.ts)));
  const at = (/** @type {TraceEvent} */ e) => Date.parse(e.ts) - t0;
  /** @type {TimelineRow[]} */
  const rows = [];
  /**
   * A row for `e` ending at its time, starting `latency` ms before it.
   * @param {TraceEvent} e @param {string} kind @param {string} label @param {string} detail
   * @param {string} status @param {number} [latency]
   */
  const row = (e, kind, label, detail, status, latency = 0) => {
    const from = Math.max(0, at(e) - latency);
    const added = { kind, label, detail, start: from, end: at(e), status, step: e.step };
    rows.push(added);
    return added;
  };
  /** @type {Map<string, TimelineRow>} */
  const open = new Map();
  let start = null;
  let end = null;
  for (const e of events) {
    const d = e.data;
    if (e.event === "run_start") start = e;
    else if (e.event === "run_end") end = e;
    else if (e.event === "llm_call") {
      const used = `${tokens(d.prompt_tokens)} → ${tokens(d.completion_tokens)} tokens`;
      const calls = d.tool_call_count > 0 ? `, ${d.tool_call_count} tool call(s)` : "";
      const detail = `${d.latency_ms} ms, ${used}${calls}${d.retries > 0 ? `, ${d.retries} retries` : ""}`;
      row(e, "llm", `model ${d.model}`, detail, "ok", d.latency_ms);
    } else if (e.event === "tool_call") {
      open.set(String(d.id), row(e, "tool", `${d.name}`, clip(String(d.arguments), 80), "running"));
    } else if (e.event === "tool_result") {
      const call = open.get(String(d.id));
      if (call === undefined) continue;
      call.end = at(e);
      call.status = d.ok ? "ok" : "error";
      call.detail = `${call.end - call.start} ms, ${d.ok ? "ok" : `error: ${clip(String(d.error), 80)}`}`;
    } else if (e.event === "compact") {
      const detail = d.ok
        ? `${d.turns_removed} turn(s) folded, ${d.tokens_before} → ${d.tokens_after} tokens`
        : `not compacted: ${d.reason}`;
      const label = d.background ? "compaction (background)" : "compaction";
      row(e, "compact", label, detail, d.ok ? "ok" : "error", d.ok ? d.latency_ms : 0);
    } else if (e.event === "error") {
      row(e, "error", `error ${d.kind}`, String(d.message), "error");
    } else if (e.event === "answer") {
      row(e, "answer", d.closing ? `closing (${d.closing})` : "answer", clip(String(d.text), 80), "ok");
    }
  }
  const last = events.length === 0 ? 0 : Math.max(...events.map(at));
  const first = events[0];
  return {
    runId: first?.run_id ?? "",
    turn: first?.turn ?? 0,
    message: String(start?.data.message ?? ""),
    outcome: end === null ? null : String(end.data.outcome),
    durationMs: end === null ? last : at(end),
    steps: end?.data.steps ?? null,
    toolCalls: end?.data.tool_calls ?? null,
    tokens: end?.data.usage?.total_tokens ?? null,
    // With AGENT_PRICES only: undefined without prices, null when a model had none.
    cost: end?.data.cost_usd,
    rows,
  };
}

/**
 * The runs of a session's events, oldest first, each with its events.
 * @param {TraceEvent[]} events
 * @returns {TraceEvent[][]}
 */
export function groupRuns(events) {
  /** @type {Map<string, TraceEvent[]>} */
  const runs = new Map();
  for (const e of events) {
    const run = runs.get(e.run_id) ?? [];
    run.push(e);
    runs.set(e.run_id, run);
  }
  return [...runs.values()];
}

/**
 * Draws `timeline` into `container`: the totals, then one row per event with its bar on the time axis.
 * @param {HTMLElement} container
 * @param {Timeline} timeline
 */
export function renderTimeline(container, timeline) {
  const span = Math.max(1, timeline.durationMs);
  const totals = [
    `turn ${timeline.turn}`,
    timeline.outcome ?? "running",
    `${timeline.durationMs} ms`,
    `${timeline.steps ?? "?"} step(s)`,
    `${timeline.toolCalls ?? "?"} tool call(s)`,
    `${tokens(timeline.tokens)} tokens`,
    ...(timeline.cost === undefined ? [] : [formatCost(timeline.cost)]),
  ];
  const list = el("ol", { class: "timeline-rows" });
  for (const row of timeline.rows) {
    const bar = el("span", { class: `bar bar-${row.kind} bar-${row.status}` });
    // Positions through the CSSOM: the policy forbids style attributes, not these properties.
    bar.style.left = `${(row.start / span) * 100}%`;
    bar.style.width = `max(3px, ${((row.end - row.start) / span) * 100}%)`;
    list.append(el(
      "li",
      { class: `timeline-row row-${row.kind}`, "data-kind": row.kind, "data-status": row.status },
      el("span", { class: "row-step" }, row.step === null ? "" : `#${row.step}`),
      el("span", { class: "row-label" }, row.label),
      el("span", { class: "row-track" }, bar),
      el("span", { class: "row-detail" }, row.detail),
    ));
  }
  container.replaceChildren(
    el("p", { class: "timeline-totals" }, totals.join(" · ")),
    el("p", { class: "timeline-message" }, clip(timeline.message, 200)),
    list,
  );
}
