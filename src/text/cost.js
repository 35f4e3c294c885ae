// @ts-check
/**
 * Dollars for people: the one rule for chat's `/usage` and the page's run timeline. Pure.
 * @module
 */

/**
 * `$0.0123`: three significant digits, two to eight decimals; `$?` when a model had no price.
 * @param {number | null} dollars
 */
export function formatCost(dollars) {
  if (dollars === null) return "$?";
  if (dollars === 0) return "$0";
  const decimals = Math.max(2, Math.min(8, 3 - Math.floor(Math.log10(dollars))));
  return `$${dollars.toFixed(decimals)}`;
}
