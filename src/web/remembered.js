// @ts-check
/// <reference lib="dom" />
/**
 * What the page remembers in this browser (`localStorage`, per origin): the session opened last, and nothing
 * else (titles are the server's). A storage that refuses (full, disabled) only means nothing is remembered.
 * @module
 */

const LAST_KEY = "mini-agent.last-session";

/** The session opened last in this browser, or null. */
export function lastSession() {
  try {
    return localStorage.getItem(LAST_KEY);
  } catch {
    return null;
  }
}

/** Remembers `id` as the session opened last. @param {string} id */
export function rememberSession(id) {
  try {
    localStorage.setItem(LAST_KEY, id);
  } catch {
    // Storage refused: the page works, it only forgets.
  }
}
