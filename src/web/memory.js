// @ts-check
/// <reference lib="dom" />
/**
 * The memory panel: the session's `[RUNTIME CONTEXT]` summary (goals, facts, todos, unresolved) and its todos
 * table, as text.
 * @module
 */
import { el } from "./dom.js";

const FIELDS = /** @type {const} */ (["goals", "facts", "todos", "unresolved"]);

/**
 * @param {HTMLElement} container
 * @param {Record<string, any> | null} summary the session's parsed summary, or null before any compaction
 * @param {{ id: number, text: string, completed: boolean }[]} todos
 */
export function renderMemory(container, summary, todos) {
  const parts = [el("h3", {}, "[RUNTIME CONTEXT]")];
  if (summary === null) {
    parts.push(el("p", { class: "muted" }, "No summary yet: nothing has been compacted."));
  } else {
    for (const field of FIELDS) {
      const items = Array.isArray(summary[field]) ? summary[field] : [];
      parts.push(el("h4", {}, field));
      parts.push(
        items.length === 0
          ? el("p", { class: "muted" }, "none")
          : el("ul", {}, ...items.map((item) => el("li", {}, String(item)))),
      );
    }
  }
  parts.push(el("h3", {}, "Todos"));
  if (todos.length === 0) parts.push(el("p", { class: "muted" }, "No todos."));
  else {
    const rows = todos.map((t) =>
      el(
        "tr",
        {},
        el("td", {}, String(t.id)),
        el("td", {}, t.text),
        el("td", {}, t.completed ? "done" : "open"),
      )
    );
    const head = el("tr", {}, el("th", {}, "#"), el("th", {}, "todo"), el("th", {}, "status"));
    parts.push(el("table", { class: "todos" }, el("thead", {}, head), el("tbody", {}, ...rows)));
  }
  container.replaceChildren(...parts);
}
