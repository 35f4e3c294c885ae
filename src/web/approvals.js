// @ts-check
/// <reference lib="dom" />
/**
 * The calls a paused turn waits for: each with its tool name and its arguments (as text), Approve and Deny, and
 * "Approve all" when there are several. The server takes the decisions on all waiting calls at once, so they
 * leave together, as soon as the last call is decided.
 * @module
 */
import { button, el } from "./dom.js";

/** @typedef {"approve" | "deny"} Decision */
/** @typedef {{ id: string, name: string, arguments: string }} ApprovalCall */
/** @typedef {{ run_id: string, turn: number, calls: ApprovalCall[], created_at: string }} PendingApproval */

/**
 * One decision per call once every call has one, else null. Pure.
 * @param {ApprovalCall[]} calls
 * @param {ReadonlyMap<string, Decision>} chosen
 * @returns {Record<string, Decision> | null}
 */
export function completeDecisions(calls, chosen) {
  /** @type {Record<string, Decision>} */
  const decisions = {};
  for (const call of calls) {
    const decision = chosen.get(call.id);
    if (decision === undefined) return null;
    decisions[call.id] = decision;
  }
  return decisions;
}

/** The arguments as the model sent them, indented when they are JSON. Pure. @param {string} text */
export function formatArguments(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 1);
  } catch {
    return text;
  }
}

/**
 * Shows the calls of `pending` in `container` (hidden when null) and hands `onDecide` one decision per call
 * once the user has decided on all of them; the buttons are disabled from then on.
 * @param {HTMLElement} container
 * @param {PendingApproval | null} pending the session's `pending_approval`
 * @param {(decisions: Record<string, Decision>) => void} onDecide
 */
export function renderApprovals(container, pending, onDecide) {
  container.hidden = pending === null;
  if (pending === null) {
    container.replaceChildren();
    delete container.dataset.pending;
    return;
  }
  // The same calls still waiting and not being sent: keep what is shown (and any decision already made),
  // so a refresh never swaps a button from under the user's pointer.
  const shown = `${pending.run_id} ${pending.calls.map((call) => call.id).join(" ")}`;
  if (container.dataset.pending === shown && !container.classList.contains("sending")) return;
  container.dataset.pending = shown;
  /** @type {Map<string, Decision>} */
  const chosen = new Map();
  /** @type {Map<string, HTMLElement>} */
  const rows = new Map();
  /** Marks `calls` with `decision`, and sends once every call has one. @param {ApprovalCall[]} calls @param {Decision} decision */
  const mark = (calls, decision) => {
    for (const call of calls) {
      chosen.set(call.id, decision);
      const row = rows.get(call.id);
      if (row === undefined) continue;
      row.dataset.decision = decision;
      const status = row.querySelector(".approval-status");
      if (status !== null) status.textContent = decision === "approve" ? "approved" : "denied";
    }
    const decisions = completeDecisions(pending.calls, chosen);
    if (decisions === null) return;
    container.classList.add("sending");
    for (const button of container.querySelectorAll("button")) button.disabled = true;
    onDecide(decisions);
  };
  for (const call of pending.calls) {
    /** @param {Decision} decision @param {string} label */
    const decide = (decision, label) => button(label, decision, () => mark([call], decision));
    rows.set(
      call.id,
      el(
        "li",
        { class: "approval-call", "data-call-id": call.id, "data-tool": call.name },
        el(
          "div",
          { class: "approval-head" },
          el("span", { class: "tool-name" }, call.name),
          " ",
          el("span", { class: "approval-status" }, "waiting"),
        ),
        el("pre", { class: "tool-args" }, formatArguments(call.arguments)),
        el("div", { class: "approval-actions" }, decide("approve", "Approve"), decide("deny", "Deny")),
      ),
    );
  }
  const approveAll = pending.calls.length < 2
    ? null
    : button("Approve all", "approve-all", () => mark(pending.calls, "approve"));
  const count = pending.calls.length;
  container.classList.remove("sending");
  container.replaceChildren(
    el("h3", {}, `Waiting for your approval: ${count} tool call${count > 1 ? "s" : ""}`),
    el(
      "p",
      { class: "muted" },
      'The turn goes on once every call is decided; a denied call gets the result "denied by the user".',
    ),
    el("ul", { class: "approval-calls" }, ...rows.values()),
  );
  if (approveAll !== null) container.append(approveAll);
}
