// @ts-check
/// <reference lib="dom" />
/**
 * The hook for tool-call approvals. The server has no approvals API yet, so this shows nothing; once it has
 * one, this module alone lists the session's pending calls with Approve / Deny (the rest of the page already
 * calls it after every turn and on every session switch).
 * @module
 */

/**
 * Shows the pending approvals of `sessionId` in `container` (hidden while there are none).
 * @param {HTMLElement} container
 * @param {string} sessionId
 * @returns {Promise<void>}
 */
export function renderApprovals(container, sessionId) {
  container.hidden = true;
  container.dataset.session = sessionId;
  return Promise.resolve();
}
