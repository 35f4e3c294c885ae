/**
 * The bench's arithmetic and printing: medians and percentiles of samples, ratios, and plain-text tables.
 * Pure.
 * @module
 */

/** A summary of a list of samples (milliseconds, unless a caller says otherwise). */
export interface Distribution {
  count: number;
  median: number;
  p95: number;
  p99: number;
  min: number;
  max: number;
}

/** The `p`-th percentile (0–100) of `values` by nearest rank; NaN for no values. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/** The median of `values` (the mean of the middle two for an even count); NaN for no values. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Count, median, p95, p99, min and max of `values`. */
export function distribution(values: readonly number[]): Distribution {
  return {
    count: values.length,
    median: median(values),
    p95: percentile(values, 95),
    p99: percentile(values, 99),
    min: values.length === 0 ? NaN : Math.min(...values),
    max: values.length === 0 ? NaN : Math.max(...values),
  };
}

/** Rounds to `digits` decimals, for JSON output that stays readable. */
export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** A table with a header row, columns padded to their widest cell, numbers right-aligned. */
export function table(header: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  const cells = [header, ...rows].map((row) => row.map((cell) => String(cell)));
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? "").length)));
  const numeric = header.map((_, i) => rows.every((row) => typeof row[i] === "number"));
  const line = (row: string[]) =>
    row.map((cell, i) => numeric[i] ? cell.padStart(widths[i]) : cell.padEnd(widths[i])).join("  ")
      .trimEnd();
  const rule = widths.map((w) => "-".repeat(w)).join("  ");
  return [line(cells[0]), rule, ...cells.slice(1).map(line)].join("\n");
}
