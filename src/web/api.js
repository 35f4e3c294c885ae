// @ts-check
/// <reference lib="dom" />
/**
 * The page's client of the HTTP API: JSON requests and the SSE turn stream, read with `fetch` (EventSource
 * cannot send an Authorization header). The token lives in `sessionStorage` and only ever travels in that
 * header, never in a URL.
 * @module
 */

const TOKEN_KEY = "mini-agent.token";

/** A non-2xx answer of the API, with its status, code and message. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message
   */
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

/** The stored token, or null. */
export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** @param {string | null} token Stores `token` for this tab, or forgets it when null. */
export function setToken(token) {
  if (token === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

/** @param {Record<string, string>} extra */
function headers(extra = {}) {
  const result = new Headers(extra);
  const token = getToken();
  if (token !== null) result.set("authorization", `Bearer ${token}`);
  return result;
}

/** @param {Response} response @returns {Promise<ApiError>} */
async function failure(response) {
  let code = "http_error";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    code = body.error?.code ?? code;
    message = body.error?.message ?? message;
  } catch {
    // Not JSON: the status line says it.
  }
  return new ApiError(response.status, code, message);
}

/**
 * Sends `method path` (with `body` as JSON) and resolves to the JSON answer, or null for 204.
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 * @throws {ApiError} for a non-2xx answer
 */
export async function request(method, path, body) {
  const init = body === undefined
    ? { method, headers: headers() }
    : { method, headers: headers({ "content-type": "application/json" }), body: JSON.stringify(body) };
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : await response.json();
}

/** @typedef {{ event: string, data: any, id?: string }} Frame An SSE frame: `id` when it carries one. */

/**
 * Splits SSE text into complete frames and the unfinished rest. Pure.
 * @param {string} text
 * @returns {{ frames: Frame[], rest: string }}
 */
export function parseSseFrames(text) {
  const blocks = text.split("\n\n");
  const rest = blocks.pop() ?? "";
  const frames = [];
  for (const block of blocks) {
    let event = "message";
    let data = "";
    /** @type {string | null} */
    let id = null;
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
      else if (line.startsWith("id: ")) id = line.slice(4);
    }
    /** @type {Frame} */
    const frame = { event, data: data === "" ? null : JSON.parse(data) };
    if (id !== null) frame.id = id;
    if (data !== "") frames.push(frame);
  }
  return { frames, rest };
}

/** Reconnections tried in a row after a stream drops, before the page gives up on it. */
const MAX_RECONNECTS = 6;

/**
 * Reads the frames of an SSE `response` into `onFrame`, noting in `position` the last event id and whether
 * the run is over (its `run_end`, or a server's error frame). Rejects when the connection drops.
 * @param {Response} response
 * @param {(frame: Frame) => void} onFrame
 * @param {{ lastId: string | null, over: boolean, frames: number }} position
 */
async function readFrames(response, onFrame, position) {
  if (response.body === null) return;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) return;
    const { frames, rest } = parseSseFrames(buffer + value);
    buffer = rest;
    for (const frame of frames) {
      if (frame.id !== undefined) position.lastId = frame.id;
      if (frame.event === "run_end" || (frame.event === "error" && frame.data?.error)) position.over = true;
      position.frames++;
      onFrame(frame);
    }
  }
}

/**
 * Posts `body` to `path` as a resumable SSE turn and hands each frame to `onFrame` as it arrives; `onRun` gets
 * the run's id first. When the connection drops before the run is over, follows the run again from the
 * events route after the last event received (on whichever server answers), so nothing is shown twice; gives
 * up after a few failed tries in a row.
 * @param {string} sessionId
 * @param {string} path
 * @param {unknown} body
 * @param {(frame: Frame) => void} onFrame
 * @param {(runId: string) => void} onRun
 * @returns {Promise<void>}
 */
async function streamPost(sessionId, path, body, onFrame, onRun) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({
      "content-type": "application/json",
      accept: "text/event-stream",
      prefer: "resumable",
    }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok || response.body === null) throw await failure(response);
  const runId = response.headers.get("x-run-id");
  if (runId !== null) onRun(runId);
  const position = { lastId: /** @type {string | null} */ (null), over: false, frames: 0 };
  /** @type {Response | null} */
  let next = response;
  for (let failed = 0;;) {
    const before = position.frames;
    try {
      if (next !== null) await readFrames(next, onFrame, position);
    } catch (error) {
      if (runId === null) throw error;
    }
    if (position.over || runId === null) return;
    failed = position.frames > before ? 0 : failed + 1;
    if (failed > MAX_RECONNECTS) {
      throw new Error("the connection dropped and the run could not be followed again");
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(200 * 2 ** failed, 3000)));
    /** @type {Record<string, string>} */
    const resume = position.lastId === null ? {} : { "last-event-id": position.lastId };
    const events = `/v1/sessions/${encodeURIComponent(sessionId)}/runs/${encodeURIComponent(runId)}/events`;
    next = await fetch(events, { headers: headers({ accept: "text/event-stream", ...resume }) }).catch(() =>
      null
    );
    if (next !== null && !next.ok) throw await failure(next);
  }
}

/**
 * Posts a turn as SSE and hands each frame to `onFrame` as it arrives: a new `message`, a `retry` of the last
 * unanswered one, or the user's `decisions` on the calls a paused turn waits for (one for every call), which
 * resume it like a turn.
 * @param {string} sessionId
 * @param {{ message: string } | { retry: true } | { decisions: Record<string, "approve" | "deny"> }} turn
 * @param {(frame: Frame) => void} onFrame
 * @param {(runId: string) => void} onRun gets the run's id once the turn is accepted
 * @returns {Promise<void>}
 * @throws {ApiError} when the turn is refused before it streams (401, 409, 429, decisions not matching, …)
 */
export function streamTurn(sessionId, turn, onFrame, onRun) {
  const id = encodeURIComponent(sessionId);
  if ("retry" in turn) return streamPost(sessionId, `/v1/sessions/${id}/retry`, undefined, onFrame, onRun);
  const route = "decisions" in turn ? "approvals" : "messages";
  return streamPost(sessionId, `/v1/sessions/${id}/${route}`, turn, onFrame, onRun);
}

/**
 * Asks the server to cancel the session's running turn (only run `runId` when given).
 * @param {string} sessionId
 * @param {string | null} runId
 * @returns {Promise<void>}
 * @throws {ApiError} 409 when no such turn runs
 */
export async function cancelTurn(sessionId, runId) {
  const query = runId === null ? "" : `?run_id=${encodeURIComponent(runId)}`;
  await request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/cancel${query}`);
}
