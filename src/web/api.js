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

/**
 * Splits SSE text into complete frames and the unfinished rest. Pure.
 * @param {string} text
 * @returns {{ frames: { event: string, data: any }[], rest: string }}
 */
export function parseSseFrames(text) {
  const blocks = text.split("\n\n");
  const rest = blocks.pop() ?? "";
  const frames = [];
  for (const block of blocks) {
    let event = "message";
    let data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (data !== "") frames.push({ event, data: JSON.parse(data) });
  }
  return { frames, rest };
}

/**
 * Posts `body` to `path` as SSE and hands each frame to `onFrame` as it arrives.
 * @param {string} path
 * @param {unknown} body
 * @param {(frame: { event: string, data: any }) => void} onFrame
 * @returns {Promise<void>}
 */
async function streamPost(path, body, onFrame) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "content-type": "application/json", accept: "text/event-stream" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok || response.body === null) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) break;
    const { frames, rest } = parseSseFrames(buffer + value);
    buffer = rest;
    frames.forEach(onFrame);
  }
}

/**
 * Posts a turn (`message`, or a retry when undefined) as SSE and hands each frame to `onFrame` as it arrives.
 * @param {string} sessionId
 * @param {string | undefined} message
 * @param {(frame: { event: string, data: any }) => void} onFrame
 * @returns {Promise<void>}
 * @throws {ApiError} when the turn is refused before it streams (401, 409, 429, …)
 */
export function streamTurn(sessionId, message, onFrame) {
  const id = encodeURIComponent(sessionId);
  if (message === undefined) return streamPost(`/v1/sessions/${id}/retry`, undefined, onFrame);
  return streamPost(`/v1/sessions/${id}/messages`, { message }, onFrame);
}

/**
 * Posts the user's `decisions` on the calls a paused turn waits for, and streams the resumed run like a turn.
 * @param {string} sessionId
 * @param {Record<string, "approve" | "deny">} decisions one for every waiting call
 * @param {(frame: { event: string, data: any }) => void} onFrame
 * @returns {Promise<void>}
 * @throws {ApiError} when refused before it streams (400 decisions not matching, 409 nothing waits, …)
 */
export function streamApproval(sessionId, decisions, onFrame) {
  return streamPost(`/v1/sessions/${encodeURIComponent(sessionId)}/approvals`, { decisions }, onFrame);
}
