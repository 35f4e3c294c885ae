// @ts-check
/// <reference lib="dom" />
/**
 * The page's one way to build elements: text always goes in as text nodes, never as HTML, so no model or tool
 * text can add markup or run script.
 * @module
 */

/**
 * An element `tag` with `props` (class, attributes, event handlers as `on<event>`) and `children` (strings
 * become text nodes; null and false are skipped).
 * @param {string} tag
 * @param {Record<string, unknown>} [props]
 * @param {...(Node | string | null | false | undefined)} children
 * @returns {HTMLElement}
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    } else if (key === "class") {
      node.className = String(value);
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

/**
 * The element of `id`, which the page must have.
 * @param {string} id
 * @returns {HTMLElement}
 */
export function byId(id) {
  const node = document.getElementById(id);
  if (node === null) throw new TypeError(`Cannot find element #${id}: the page is missing it`);
  return node;
}

/**
 * `text` shortened to `max` characters with an ellipsis.
 * @param {string} text
 * @param {number} max
 */
export function clip(text, max) {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/**
 * A `<button type="button">` of class `className` showing `label`, calling `onClick`; `props` adds attributes.
 * @param {string} label
 * @param {string} className
 * @param {() => unknown} onClick
 * @param {Record<string, unknown>} [props]
 */
export function button(label, className, onClick, props = {}) {
  return el("button", { type: "button", class: className, onclick: onClick, ...props }, label);
}
