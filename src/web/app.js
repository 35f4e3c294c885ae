// @ts-check
/// <reference lib="dom" />
/**
 * The page's entry: signs in when the server asks for a token, lists the user's sessions and reopens the last
 * one, runs turns (and the runs resumed by approval decisions) as SSE into the chat, and keeps the timeline,
 * memory and approval panels on the open session.
 * @module
 */
import { ApiError, cancelTurn, getToken, request, setToken, streamTurn } from "./api.js";
import { renderApprovals } from "./approvals.js";
import { LiveTurn, renderHistory } from "./chat.js";
import { button, byId, clip, el } from "./dom.js";
import { renderMemory } from "./memory.js";
import { lastSession, rememberSession } from "./remembered.js";
import { titleFrom } from "../text/title.js";
import { buildTimeline, groupRuns, renderTimeline } from "./timeline.js";

/** @typedef {import("./timeline.js").TraceEvent} TraceEvent */

const state = {
  /** The open session's id: chosen by `start`. @type {string} */
  session: "",
  busy: false,
  /** The run being streamed, once the server named it: what Stop cancels. @type {string | null} */
  runId: null,
  /** The session of the run being streamed (another may be open by now). */
  runSession: "",
  /** @type {TraceEvent[][]} */
  runs: [],
  /** The ids the session list holds: another id is a new session, not asked for (it would be a 404). */
  known: new Set(),
  /** The open session's title, as the server has it (null: none yet). @type {string | null} */
  title: null,
};

function newSessionId() {
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  return `web-${stamp}-${Math.random().toString(36).slice(2, 6)}`;
}

/** Asks for a token, saying why. @param {string} why */
function showLogin(why) {
  byId("login").hidden = false;
  byId("app").hidden = true;
  byId("login-error").textContent = why;
  byId("token").focus();
}

/** A 401 sends the user to the token form; anything else is for the caller. @param {unknown} error */
function handleAuth(error) {
  if (!(error instanceof ApiError) || error.status !== 401) return false;
  const had = getToken() !== null;
  setToken(null);
  showLogin(
    had
      ? `The server did not accept this token (${error.message}). Check it and try again.`
      : "This server needs an API token.",
  );
  return true;
}

/**
 * Lists the user's sessions, newest first, by title where they have one.
 * @returns {Promise<{ id: string }[]>}
 */
async function loadSessions() {
  const { sessions } = await request("GET", "/v1/sessions");
  state.known = new Set(sessions.map((/** @type {{id: string}} */ s) => s.id));
  const items = sessions.map((/** @type {{id: string, title: string | null, turn_count: number}} */ s) => {
    if (s.id === state.session && s.title !== null) state.title = s.title;
    const open = button(s.title ?? s.id, "open", () => openSession(s.id), { title: s.id });
    const remove = button("✕", "delete", () => deleteSession(s.id), {
      "aria-label": `Delete session ${s.id}`,
    });
    const current = s.id === state.session ? "session current" : "session";
    return el(
      "li",
      { class: current, "data-session": s.id },
      open,
      el("span", { class: "turns" }, `${s.turn_count} turn(s)`),
      remove,
    );
  });
  const none = el("li", { class: "muted" }, "No sessions yet.");
  byId("session-list").replaceChildren(...(items.length === 0 ? [none] : items));
  showTitle();
  return sessions;
}

/** @param {string} id */
async function deleteSession(id) {
  if (!confirm(`Delete session "${id}" with its messages, todos and summary?`)) return;
  await guarded(async () => {
    await request("DELETE", `/v1/sessions/${encodeURIComponent(id)}`);
    if (id === state.session) await openSession(newSessionId());
    else await loadSessions();
  });
}

/** Every trace event of the session, page by page. @param {string} id @returns {Promise<TraceEvent[]>} */
async function loadTrace(id) {
  /** @type {TraceEvent[]} */
  const events = [];
  let cursor = null;
  for (let page = 0; page < 20; page++) {
    const query = cursor === null ? "?limit=1000" : `?limit=1000&cursor=${encodeURIComponent(cursor)}`;
    const body = await request("GET", `/v1/sessions/${encodeURIComponent(id)}/trace${query}`);
    events.push(...body.events);
    cursor = body.next_cursor;
    if (cursor === null) break;
  }
  return events;
}

/**
 * Reloads the open session's messages, trace, memory and approvals; a session not yet used shows empty. All of
 * it is of the session open when it started: another opened meanwhile draws its own.
 */
async function refreshSession() {
  const open = state.session;
  const id = encodeURIComponent(open);
  /** @type {any} */
  let session = { messages: [], summary: null, title: null };
  let todos = [];
  /** @type {TraceEvent[]} */
  let events = [];
  try {
    if (!state.known.has(open)) throw new ApiError(404, "not_found", "a new session");
    session = await request("GET", `/v1/sessions/${id}`);
    todos = (await request("GET", `/v1/sessions/${id}/todos`)).todos;
    events = await loadTrace(open);
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) throw error;
  }
  if (state.session !== open) return;
  state.runs = groupRuns(events);
  const closings = new Map();
  let compactedTurns = 0;
  for (const e of events) {
    if (e.event === "answer" && e.data.closing) closings.set(e.data.text, e.data.closing);
    if (e.event === "compact" && e.data.ok) compactedTurns += e.data.turns_removed;
  }
  const list = byId("messages");
  renderHistory(list, session.messages, { compactedTurns, closings });
  const first = session.messages.find((/** @type {{ role: string }} */ m) => m.role === "user");
  if (first === undefined) list.append(emptyState());
  // A session asked before the server kept titles has none until its next question: named here meanwhile.
  state.title = session.title ?? (titleFrom(first?.content ?? "") || null);
  showTitle();
  // A long session opens at its newest exchange, not at its top.
  list.lastElementChild?.scrollIntoView({ block: "end" });
  renderMemory(byId("memory"), session.summary, todos);
  drawRuns();
  showApprovals(session.pending_approval ?? null);
}

/**
 * Shows the calls the session's turn waits for, and says in the composer that a message must wait (the server
 * would refuse it with 409 until they are decided).
 * @param {import("./approvals.js").PendingApproval | null} pending
 */
function showApprovals(pending) {
  // The decisions on every waiting call resume the run, drawn like a turn.
  renderApprovals(byId("approvals"), pending, (decisions) => streamRun(undefined, { decisions }));
  const note = byId("composer-note");
  note.hidden = pending === null;
  note.textContent = pending === null
    ? ""
    : "A tool call waits for your approval above: approve or deny it first.";
  byId("composer").classList.toggle("waiting", pending !== null);
}

function drawRuns() {
  const select = /** @type {HTMLSelectElement} */ (byId("run-select"));
  select.replaceChildren(...state.runs.map((run) => {
    const t = buildTimeline(run);
    return el("option", { value: t.runId }, `turn ${t.turn}: ${clip(t.message, 40)}`);
  }));
  const last = state.runs.at(-1);
  if (last === undefined) byId("timeline").replaceChildren(el("p", { class: "muted" }, "No runs yet."));
  else showRun(last[0].run_id, false);
}

/** @param {string} runId @param {boolean} [reveal] */
function showRun(runId, reveal = true) {
  const run = state.runs.find((r) => r[0].run_id === runId);
  if (run === undefined) return;
  /** @type {HTMLSelectElement} */ (byId("run-select")).value = runId;
  renderTimeline(byId("timeline"), buildTimeline(run));
  if (reveal) byId("timeline-panel").scrollIntoView({ block: "start" });
}

/** What an empty session says to do. */
function emptyState() {
  return el(
    "li",
    { class: "empty" },
    el("p", {}, "Ask anything below. The answer streams in here, with each tool call the model makes."),
    el(
      "p",
      { class: "muted" },
      "Enter sends, Shift+Enter starts a new line, Esc stops a running answer, Ctrl+K opens a new session.",
    ),
  );
}

/** Shows the open session's title (its first question's, or the name it was given) and its id, here and in the list. */
function showTitle() {
  const title = state.title;
  byId("session-title").textContent = title ?? "New session";
  byId("session-id").textContent = state.session;
  const entry = [...document.querySelectorAll("#session-list .session")]
    .find((node) => /** @type {HTMLElement} */ (node).dataset.session === state.session);
  const open = entry?.querySelector(".open");
  if (open && title !== null) open.textContent = title;
}

/** @param {string} id */
async function openSession(id) {
  state.session = id;
  state.title = null;
  history.replaceState(null, "", `#${encodeURIComponent(id)}`);
  rememberSession(id);
  showTitle();
  await guarded(async () => {
    await loadSessions();
    await refreshSession();
  });
}

/** Runs `action`, turning a 401 into the token form and anything else into an alert line. @param {() => Promise<void>} action */
async function guarded(action) {
  try {
    await action();
  } catch (error) {
    if (handleAuth(error)) return;
    byId("status").textContent = `Error: ${error instanceof Error ? error.message : String(error)}`;
  }
}

/** Sends `message` (undefined: retries the last unanswered one) and draws its frames as they come. @param {string | undefined} message */
function send(message) {
  // The server names a session from its first question as it stores it; shown here at once, by the same rule.
  if (message !== undefined && state.title === null && titleFrom(message) !== "") {
    state.title = titleFrom(message);
    showTitle();
  }
  return streamRun(message, message === undefined ? { retry: true } : { message });
}

/**
 * Runs one streamed request (a turn, a retry, or decisions) into a live turn, then refreshes the panels.
 * @param {string | undefined} message the user's message to show first, if any
 * @param {Parameters<typeof streamTurn>[1]} posted what to post; a refused one's Retry posts it again
 */
async function streamRun(message, posted) {
  if (state.busy) return;
  state.busy = true;
  state.runId = null;
  state.runSession = state.session;
  byId("composer").classList.add("busy");
  byId("stop").hidden = false;
  const session = state.session;
  byId("messages").querySelector(".empty")?.remove();
  const turn = new LiveTurn(byId("messages"), message, {
    onRetry: () => send(undefined),
    onTimeline: showRun,
  });
  /** The run's events so far: the timeline fills in as they arrive. @type {TraceEvent[]} */
  const live = [];
  /** @param {import("./api.js").Frame} frame */
  const onFrame = (frame) => {
    // Another session opened meanwhile: this run goes on, out of sight.
    if (state.session !== session) return;
    turn.onFrame(frame);
    if (typeof frame.data?.run_id === "string" && typeof frame.data?.event === "string") {
      live.push(frame.data);
      renderTimeline(byId("timeline"), buildTimeline(live));
    }
  };
  try {
    await streamTurn(session, posted, onFrame, (runId) => {
      state.runId = runId;
      // The session is stored from its first accepted turn on: the list shows it while the turn runs.
      if (!state.known.has(session)) guarded(async () => void await loadSessions());
    });
  } catch (error) {
    if (!handleAuth(error)) {
      const cause = error instanceof ApiError
        ? `${error.code}: ${error.message}`
        : `network: ${String(error)}`;
      // Refused before it ran (busy, bad input, a turn waiting for approval): nothing was saved, so a retry
      // sends the same request again.
      turn.showError(cause, () => streamRun(message, posted));
    }
  } finally {
    turn.end();
    state.busy = false;
    state.runId = null;
    byId("composer").classList.remove("busy");
    byId("stop").hidden = true;
  }
  // The list's turn counts, the memory panel, the timeline and the approvals follow the finished run.
  await guarded(async () => void await loadSessions());
  if (state.session === session) await guarded(refreshTrace);
}

/**
 * Re-reads the trace, the memory panel and the approvals, keeping the chat as drawn live; of the session open
 * when it started only (one opened meanwhile, which may not exist yet, draws its own).
 */
async function refreshTrace() {
  const open = state.session;
  const id = encodeURIComponent(open);
  const session = await request("GET", `/v1/sessions/${id}`).catch(() => null);
  const todos = session === null ? [] : (await request("GET", `/v1/sessions/${id}/todos`)).todos;
  const events = await loadTrace(open).catch(() => []);
  if (state.session !== open) return;
  renderMemory(byId("memory"), session?.summary ?? null, todos);
  state.runs = groupRuns(events);
  drawRuns();
  showApprovals(session?.pending_approval ?? null);
}

function wire() {
  const input = /** @type {HTMLTextAreaElement} */ (byId("input"));
  const submit = () => {
    const text = input.value.trim();
    // Before a session is open (just signed in, the list still loading) the text stays for the next Enter.
    if (text === "" || state.busy || state.session === "") return;
    input.value = "";
    send(text);
  };
  byId("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
  });
  input.addEventListener("keydown", (event) => {
    // Enter sends, Shift+Enter is a newline; Enter that ends an IME composition is neither.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  byId("new-session").addEventListener("click", newSession);
  byId("stop").addEventListener("click", stop);
  // Esc stops the running answer; Ctrl+K (Cmd+K) opens a new session, wherever the focus is.
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.busy) {
      event.preventDefault();
      stop();
    } else if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "k") {
      event.preventDefault();
      newSession();
    }
  });
  wireRename();
  byId("run-select").addEventListener("change", (event) => {
    showRun(/** @type {HTMLSelectElement} */ (event.target).value, false);
  });
  byId("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = /** @type {HTMLInputElement} */ (byId("token"));
    if (token.value.trim() === "") return;
    setToken(token.value.trim());
    token.value = "";
    byId("login").hidden = true;
    byId("app").hidden = false;
    start();
  });
}

/** Stop cancels the running turn on the server (closing the stream would not: the turn outlives it). */
function stop() {
  if (state.busy) guarded(() => cancelTurn(state.runSession, state.runId));
}

async function newSession() {
  await openSession(newSessionId());
  byId("input").focus();
}

/**
 * Rename edits the title in place: Enter or leaving the field sends it to the server, Esc drops the edit; a blank
 * title names the session from its first question again.
 */
function wireRename() {
  const input = /** @type {HTMLInputElement} */ (byId("title-input"));
  const title = byId("session-title");
  const rename = byId("rename");
  /** @param {boolean} keep */
  const finish = (keep) => {
    if (input.hidden) return;
    input.hidden = true;
    title.hidden = false;
    rename.hidden = false;
    if (keep) guarded(() => renameSession(state.session, input.value));
  };
  rename.addEventListener("click", () => {
    input.value = state.title ?? "";
    input.hidden = false;
    title.hidden = true;
    rename.hidden = true;
    input.focus();
    input.select();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      finish(true);
    } else if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      finish(false);
    }
  });
  input.addEventListener("blur", () => finish(true));
}

/**
 * Gives session `id` the title `text` on the server, then shows the server's title. A session not stored yet
 * (no turn) has nothing to rename: the title stays as it is.
 * @param {string} id
 * @param {string} text
 */
async function renameSession(id, text) {
  if (!state.known.has(id)) {
    byId("status").textContent = "Ask a first question: a session is named once it has one.";
    return;
  }
  const renamed = await request("PATCH", `/v1/sessions/${encodeURIComponent(id)}`, { title: text });
  if (state.session === id) state.title = renamed.title;
  showTitle();
  await loadSessions();
}

/**
 * Opens the session the address names, else the one opened last here if it still exists, else the newest,
 * else a new one.
 */
async function start() {
  await guarded(async () => {
    const named = decodeURIComponent(location.hash.slice(1));
    if (named !== "") return await openSession(named);
    const sessions = await loadSessions();
    const last = lastSession();
    await openSession(last !== null && state.known.has(last) ? last : sessions[0]?.id ?? newSessionId());
  });
}

wire();
start();
