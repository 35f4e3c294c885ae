// @ts-check
/// <reference lib="dom" />
/**
 * The memory panel: the session's `[RUNTIME CONTEXT]` summary (goals, facts, todos, unresolved), its todos
 * table, and the user's memory across sessions (`GET /v1/memory`), each item with a button that erases it.
 * @module
 */
import { request } from "./api.js";
import { button, el } from "./dom.js";

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
    /** @param {"th" | "td"} tag @param {string[]} cells */
    const row = (tag, cells) => el("tr", {}, ...cells.map((cell) => el(tag, {}, cell)));
    const rows = todos.map((t) => row("td", [String(t.id), t.text, t.completed ? "done" : "open"]));
    const head = row("th", ["#", "todo", "status"]);
    parts.push(el("table", { class: "todos" }, el("thead", {}, head), el("tbody", {}, ...rows)));
  }
  const userMemory = el("div", { class: "user-memory" }, el("p", { class: "muted" }, "Loading…"));
  parts.push(el("h3", {}, "Your memory across sessions"), userMemory);
  container.replaceChildren(...parts);
  loadUserMemory(userMemory);
}

/** Fills `box` with the user's items, each with its delete button; a failure is said in the box. */
async function loadUserMemory(/** @type {HTMLElement} */ box) {
  try {
    /** @type {{ items: { id: number, text: string, source_session: string | null }[] }} */
    const { items } = await request("GET", "/v1/memory");
    if (items.length === 0) {
      box.replaceChildren(
        el("p", { class: "muted" }, "Nothing yet: compaction and the remember tool keep facts here."),
      );
      return;
    }
    const rows = items.map((item) =>
      el(
        "li",
        { class: "memory-item", "data-id": String(item.id) },
        el("span", { class: "memory-text" }, item.text),
        el("span", { class: "muted" }, ` (from ${item.source_session ?? "a tool"}) `),
        button("Delete", "forget", () => forget(box, `/v1/memory/${item.id}`), {
          title: "Erase this item from your memory",
        }),
      )
    );
    const all = button(
      "Delete all",
      "forget-all",
      () => confirm("Erase all of your memory? Sessions stay.") && forget(box, "/v1/memory"),
    );
    box.replaceChildren(el("ul", {}, ...rows), all);
  } catch (error) {
    box.replaceChildren(el("p", { class: "muted" }, `Cannot show your memory: ${String(error)}`));
  }
}

/** Erases what `path` names, then shows the list again. */
async function forget(/** @type {HTMLElement} */ box, /** @type {string} */ path) {
  try {
    await request("DELETE", path);
  } catch (error) {
    box.append(el("p", { class: "muted" }, `Cannot delete: ${String(error)}`));
    return;
  }
  await loadUserMemory(box);
}
