// @ts-check
/// <reference lib="dom" />
/**
 * What the page remembers in this browser (`localStorage`, per origin): the session opened last, and the
 * sessions' titles, each named from its first question unless renamed. The API has no title field (a stored
 * one would need a column in the sessions table), so titles stay with the browser that set them; a session
 * opened elsewhere is named again from its first question when it is opened here. A storage that refuses
 * (full, disabled) only means nothing is remembered.
 * @module
 */

const LAST_KEY = "mini-agent.last-session";
const TITLES_KEY = "mini-agent.titles";
/** Titles kept at most: the oldest set are forgotten first. */
const MAX_TITLES = 500;
const MAX_LENGTH = 80;

/**
 * A session's title from its first question: the first non-empty line, its spaces collapsed, at most 80
 * characters (an ellipsis when cut); empty for a message with no text. Pure.
 * @param {string} message
 */
export function titleFrom(message) {
  const line = message.split("\n").map((l) => l.replace(/\s+/g, " ").trim()).find((l) => l !== "") ?? "";
  return line.length <= MAX_LENGTH ? line : `${line.slice(0, MAX_LENGTH - 1)}…`;
}

/** @returns {Record<string, string>} */
function titles() {
  try {
    const stored = JSON.parse(localStorage.getItem(TITLES_KEY) ?? "{}");
    return stored !== null && typeof stored === "object" && !Array.isArray(stored) ? stored : {};
  } catch {
    return {};
  }
}

/** @param {string} key @param {string | null} value */
function store(key, value) {
  try {
    if (value === null) localStorage.removeItem(key);
    else localStorage.setItem(key, value);
  } catch {
    // Storage refused: the page works, it only forgets.
  }
}

/** The title this browser has for session `id`, or null. @param {string} id */
export function storedTitle(id) {
  const title = titles()[id];
  return typeof title === "string" && title !== "" ? title : null;
}

/**
 * Names session `id` (at most 80 characters), or forgets its title when `title` is null or blank.
 * @param {string} id
 * @param {string | null} title
 */
export function storeTitle(id, title) {
  const all = titles();
  delete all[id];
  const clean = title === null ? "" : titleFrom(title);
  if (clean !== "") all[id] = clean;
  const ids = Object.keys(all);
  for (const old of ids.slice(0, Math.max(0, ids.length - MAX_TITLES))) delete all[old];
  store(TITLES_KEY, JSON.stringify(all));
}

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
  store(LAST_KEY, id);
}
