// @ts-check
/// <reference lib="dom" />
/**
 * The chat column: a session's stored messages, and a live turn drawn from its SSE frames (answer text as it
 * streams, rendered as markdown; the step running now; tool calls inline and collapsible; approvals asked and
 * decided; the runtime's fixed closings; errors with a retry button).
 * @module
 */
import { button, el } from "./dom.js";
import { markdownNodes } from "./markdown_view.js";

/**
 * A collapsible tool call: name and status, its arguments, and once known its result.
 * @param {{ id: string, name: string, arguments: string }} call
 */
function toolCall(call) {
  const status = el("span", { class: "tool-status" }, "running");
  const result = el("pre", { class: "tool-result" }, "…");
  const node = el(
    "details",
    { class: "tool", "data-tool": call.name, "data-call-id": call.id },
    el("summary", {}, el("span", { class: "tool-name" }, call.name), " ", status),
    el("pre", { class: "tool-args" }, call.arguments),
    result,
  );
  /** @param {{ ok: boolean, text: string }} outcome */
  const settle = ({ ok, text }) => {
    status.textContent = ok ? "ok" : "error";
    node.dataset.status = ok ? "ok" : "error";
    result.textContent = text;
  };
  return { node: el("li", { class: "msg tools" }, node), settle };
}

/** @param {string} content A stored tool message: `{"ok":…,"data":…}` or `{"ok":false,"error":…}`. */
function toolOutcome(content) {
  try {
    const result = JSON.parse(content);
    return { ok: result.ok === true, text: JSON.stringify(result.ok ? result.data : result.error, null, 1) };
  } catch {
    return { ok: false, text: content };
  }
}

/** An answer, its markdown rendered; a runtime closing is the runtime's own text, shown as it is. @param {string} text @param {string | undefined} closing */
function answer(text, closing) {
  const node = el("li", { class: closing ? "msg assistant closing" : "msg assistant" });
  if (closing) node.append(el("span", { class: "closing-label" }, `runtime closing: ${closing}`));
  node.append(el("div", { class: "text" }, ...(closing ? [text] : markdownNodes(text))));
  return node;
}

/** @param {number} turns */
export function compactionMarker(turns) {
  return el("li", { class: "marker compacted" }, `compacted ${turns} turn(s)`);
}

/**
 * Draws stored `messages` into `list`, after a marker when `compactedTurns` earlier turns were folded away.
 * @param {HTMLElement} list
 * @param {{ role: string, content: string | null, tool_calls: any[] | null, tool_call_id: string | null }[]} messages
 * @param {{ compactedTurns: number, closings: Map<string, string> }} options `closings`: answer text → kind
 */
export function renderHistory(list, messages, options) {
  list.replaceChildren();
  if (options.compactedTurns > 0) list.append(compactionMarker(options.compactedTurns));
  /** @type {Map<string, (outcome: { ok: boolean, text: string }) => void>} */
  const pending = new Map();
  for (const m of messages) {
    if (m.role === "user") list.append(el("li", { class: "msg user" }, m.content ?? ""));
    if (m.role === "assistant") {
      if (m.content) list.append(answer(m.content, options.closings.get(m.content)));
      for (const call of m.tool_calls ?? []) {
        const view = toolCall(call);
        pending.set(call.id, view.settle);
        list.append(view.node);
      }
    }
    if (m.role === "tool" && m.tool_call_id !== null) {
      pending.get(m.tool_call_id)?.(toolOutcome(m.content ?? ""));
    }
  }
}

/** A turn being drawn from its frames into the chat list, with a line saying what runs now below it. */
export class LiveTurn {
  #list;
  #actions;
  /** The streamed answer's text element and its markdown so far. @type {{ node: HTMLElement, text: string } | null} */
  #text = null;
  #drawPending = false;
  /** @type {Map<string, (outcome: { ok: boolean, text: string }) => void>} */
  #calls = new Map();
  /** The calls of the running step without a result yet, by id: their names. @type {Map<string, string>} */
  #running = new Map();
  /** The line that says what runs now: kept last while the turn runs. */
  #progress = el("li", { class: "progress", role: "status" }, el("span", { class: "spinner" }), el("span"));

  /**
   * @param {HTMLElement} list
   * @param {string | undefined} message the user's message (undefined for a retry)
   * @param {{ onRetry(): void, onTimeline(runId: string): void }} actions
   */
  constructor(list, message, actions) {
    this.#list = list;
    this.#actions = actions;
    if (message !== undefined) this.#add(el("li", { class: "msg user" }, message));
    this.#say("thinking…");
  }

  /** @param {HTMLElement} node */
  #add(node) {
    if (this.#progress.isConnected) this.#list.insertBefore(node, this.#progress);
    else this.#list.append(node);
    (this.#progress.isConnected ? this.#progress : node).scrollIntoView({ block: "end" });
  }

  /** Shows `what` as the running step (null: nothing runs any more). @param {string | null} what */
  #say(what) {
    if (what === null) {
      this.#progress.remove();
      return;
    }
    const label = /** @type {HTMLElement} */ (this.#progress.lastChild);
    if (label.textContent !== what) label.textContent = what;
    if (!this.#progress.isConnected) this.#list.append(this.#progress);
    this.#progress.scrollIntoView({ block: "end" });
  }

  /** The running step while tools run: `calling calculator, todo…`. */
  #calling() {
    return `calling ${[...new Set(this.#running.values())].join(", ")}…`;
  }

  /** Redraws the streamed answer's markdown once per frame of the screen, however many deltas came. */
  #drawText() {
    if (this.#drawPending) return;
    this.#drawPending = true;
    requestAnimationFrame(() => {
      this.#drawPending = false;
      this.#drawTextNow();
      this.#progress.scrollIntoView({ block: "end" });
    });
  }

  #drawTextNow() {
    this.#text?.node.replaceChildren(...markdownNodes(this.#text.text));
  }

  /** Draws one SSE frame. @param {{ event: string, data: any }} frame */
  onFrame({ event, data }) {
    if (event === "reasoning") {
      // The model's reasoning streams in (AGENT_SHOW_THINKING): only the progress line says so.
      if (this.#text === null) this.#say("reasoning…");
    } else if (event === "delta") {
      if (this.#text === null) {
        const bubble = answer("", undefined);
        bubble.classList.add("streaming");
        this.#text = { node: /** @type {HTMLElement} */ (bubble.lastChild), text: "" };
        this.#add(bubble);
        this.#say("writing…");
      }
      this.#text.text += data.text;
      this.#drawText();
    } else if (event === "tool_call") {
      // Text streamed before a call stays as the model's note, drawn whole; the answer comes later.
      this.#drawTextNow();
      this.#text?.node.closest("li")?.classList.remove("streaming");
      this.#text = null;
      const view = toolCall(data.data);
      this.#calls.set(data.data.id, view.settle);
      this.#running.set(data.data.id, data.data.name);
      this.#add(view.node);
      this.#say(this.#calling());
    } else if (event === "tool_result") {
      const d = data.data;
      this.#calls.get(d.id)?.({ ok: d.ok, text: JSON.stringify(d.ok ? d.data : d.error, null, 1) });
      this.#running.delete(d.id);
      // With every result in, the model is asked again.
      this.#say(this.#running.size === 0 ? "thinking…" : this.#calling());
    } else if (event === "compact" && data.data.ok) {
      this.#add(compactionMarker(data.data.turns_removed));
    } else if (event === "approval_requested") {
      const names = data.data.calls.map((/** @type {{ name: string }} */ c) => c.name).join(", ");
      this.#add(el("li", { class: "marker approval" }, `waiting for your approval: ${names}`));
      this.#say(null);
    } else if (event === "approval_decided") {
      const said = data.data.decisions.map((/** @type {{ name: string, decision: string }} */ d) =>
        `${d.name} ${d.decision === "approve" ? "approved" : "denied"}`
      );
      this.#add(el("li", { class: "marker approval" }, said.join(", ")));
    } else if (event === "answer") {
      this.#text?.node.closest("li")?.remove();
      this.#text = null;
      this.#say(null);
      this.#add(answer(data.data.text, data.data.closing));
    } else if (event === "error") {
      // A stopped run's own error event is passed over: the server's frame after it says why (a Stop, the
      // shutdown). A Stop the user asked for is no error: one quiet line, nothing to retry.
      if (data.data?.kind === "aborted") return;
      if (data.error?.code === "turn_cancelled") {
        this.#say(null);
        this.#add(el("li", { class: "marker stopped" }, "stopped"));
        return;
      }
      // A run's error event carries `data`; an error frame of the server carries `error`.
      const cause = data.error
        ? `${data.error.code}: ${data.error.message}`
        : `${data.data.kind}: ${data.data.message}`;
      this.showError(cause);
    } else if (event === "run_end") {
      this.#say(null);
      const runId = data.run_id;
      const link = button("timeline", "link", () => this.#actions.onTimeline(runId));
      this.#add(el("li", { class: "run-end" }, `${data.data.outcome} · ${data.data.steps} step(s) `, link));
    }
  }

  /** Takes the running-step line away: the request is over, however it ended. */
  end() {
    this.#say(null);
  }

  /**
   * Shows `cause` with a retry button that runs `retry` (by default the route that reruns the saved message).
   * @param {string} cause
   * @param {() => void} [retry]
   */
  showError(cause, retry = this.#actions.onRetry) {
    const again = button("Retry", "retry", () => retry());
    this.#add(
      el("li", { class: "msg error", role: "alert" }, el("span", { class: "cause" }, cause), " ", again),
    );
  }
}
