/**
 * The approval policy: which tools run at once (`auto`), wait for the user (`ask`) or never run (`deny`). It
 * comes from the `approval` key of the MCP config file; names are `<server>__<tool>` for a server's tools and
 * plain for the built-ins.
 * @module
 */
import { isRecord } from "../_json.ts";

/** What happens to a call of a tool. */
export type ApprovalMode = "ask" | "deny" | "auto";

/** The parsed policy: a default for server tools, and modes per exact name or `<server>__*` pattern. */
export interface ApprovalPolicy {
  /** The mode of a server's tool (`<server>__<tool>`) the policy does not name. */
  readonly default: ApprovalMode;
  /** Modes by exact tool name or by `<server>__*` pattern. */
  readonly tools: Readonly<Record<string, ApprovalMode>>;
}

/** The policy when the config has none: every tool runs at once. */
export const AUTO_POLICY: ApprovalPolicy = Object.freeze({ default: "auto", tools: Object.freeze({}) });

const MODES: readonly string[] = ["ask", "deny", "auto"];

/** `policy` with every `ask` made `deny`: for a turn nobody could come back to approve (no stored session). */
export function askAsDeny(policy: ApprovalPolicy): ApprovalPolicy {
  const strict = (mode: ApprovalMode): ApprovalMode => mode === "ask" ? "deny" : mode;
  const tools = Object.fromEntries(Object.entries(policy.tools).map(([name, mode]) => [name, strict(mode)]));
  return Object.freeze({ default: strict(policy.default), tools: Object.freeze(tools) });
}

/**
 * `policy` with each of `tools` (exact names) run at once: a server entry's `"autoApprove"` list. An entry of
 * the policy's own for the same name wins: the `approval` section is where the user decides.
 */
export function autoApproving(policy: ApprovalPolicy, tools: readonly string[]): ApprovalPolicy {
  const added = tools.filter((name) => !Object.hasOwn(policy.tools, name));
  if (added.length === 0) return policy;
  const merged: Record<string, ApprovalMode> = Object.assign(Object.create(null), policy.tools);
  for (const name of added) merged[name] = "auto";
  return Object.freeze({ default: policy.default, tools: Object.freeze(merged) });
}

function mode(value: unknown, where: string, source: string): ApprovalMode {
  if (typeof value === "string" && MODES.includes(value)) return value as ApprovalMode;
  const got = typeof value === "string" ? JSON.stringify(value) : value === null ? "null" : typeof value;
  throw new SyntaxError(`${source}: ${where}: expected "ask", "deny" or "auto", got ${got}`);
}

/**
 * The policy of the config's `approval` value (undefined or null: {@linkcode AUTO_POLICY}). A `SyntaxError`
 * of one line names the entry at fault, prefixed by `source` (the file name).
 */
export function parseApprovalPolicy(raw: unknown, source = "mcp.json"): ApprovalPolicy {
  if (raw === undefined || raw === null) return AUTO_POLICY;
  if (!isRecord(raw)) throw new SyntaxError(`${source}: approval: expected an object`);
  for (const key of Object.keys(raw)) {
    if (key !== "default" && key !== "tools") {
      throw new SyntaxError(`${source}: approval: unknown key "${key}" (expected "default" and "tools")`);
    }
  }
  const fallback = raw.default === undefined ? "auto" : mode(raw.default, "approval.default", source);
  // No prototype: a tool named "constructor" or "__proto__" is an entry like any other.
  const tools: Record<string, ApprovalMode> = Object.create(null);
  if (raw.tools !== undefined) {
    if (!isRecord(raw.tools)) throw new SyntaxError(`${source}: approval.tools: expected an object`);
    for (const [name, value] of Object.entries(raw.tools)) {
      const where = `approval.tools[${JSON.stringify(name)}]`;
      if (name === "" || (name.includes("*") && !/^[^*]+__\*$/.test(name))) {
        throw new SyntaxError(`${source}: ${where}: expected a tool name or a "<server>__*" pattern`);
      }
      tools[name] = mode(value, where, source);
    }
  }
  return Object.freeze({ default: fallback, tools: Object.freeze(tools) });
}

/**
 * The mode of `toolName`: its exact entry, else its server's `<server>__*` pattern, else the default for a
 * server's tool (a name with `__`) and `auto` for a built-in. Never throws.
 */
export function decide(policy: ApprovalPolicy, toolName: string): ApprovalMode {
  const entry = (name: string) => Object.hasOwn(policy.tools, name) ? policy.tools[name] : undefined;
  const exact = entry(toolName);
  if (exact !== undefined) return exact;
  const split = toolName.indexOf("__");
  if (split <= 0) return "auto";
  return entry(`${toolName.slice(0, split)}__*`) ?? policy.default;
}
