/**
 * ToolNames: the names MCP tools are offered under, `<server>__<tool>`, made valid for OpenAI function names
 * (`^[a-zA-Z0-9_-]{1,64}$`) and kept distinct. The same server and tool always get the same name, so a
 * session's stored calls still resolve after a restart with the same config.
 * @module
 */

/** Longest function name providers accept. */
export const MAX_TOOL_NAME_CHARS = 64;

/** The characters kept of a name part; every other one becomes `_`. */
function clean(part: string): string {
  return part.replace(/[^a-zA-Z0-9_-]/g, "_");
}

/** A short stable digest (FNV-1a, 32 bits, base 36) of `text`, to tell shortened names apart. */
function digest(text: string): string {
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash.toString(36).padStart(7, "0");
}

/**
 * The exposed name of `tool` of `server`: `<server>__<tool>` with other characters as `_`; when that is over
 * 64 characters or was changed by cleaning, a prefix of it plus `_` and a digest of the exact pair, so two
 * pairs that clean to the same text still differ. Pure and deterministic.
 */
export function exposedToolName(server: string, tool: string): string {
  const plain = `${server}__${tool}`;
  const cleaned = `${clean(server)}__${clean(tool)}`;
  if (cleaned === plain && plain.length <= MAX_TOOL_NAME_CHARS) return plain;
  const suffix = `_${digest(JSON.stringify([server, tool]))}`;
  return `${cleaned.slice(0, MAX_TOOL_NAME_CHARS - suffix.length)}${suffix}`;
}

/** The exposed names taken so far, each with the server and tool it stands for. */
export class ToolNames {
  #byName = new Map<string, { server: string; tool: string }>();

  /**
   * The exposed name for `tool` of `server`, remembered; null when it collides with a name already taken by
   * another pair (the later tool is then left out, and the caller says so).
   */
  add(server: string, tool: string): string | null {
    const name = exposedToolName(server, tool);
    const taken = this.#byName.get(name);
    if (taken !== undefined && (taken.server !== server || taken.tool !== tool)) return null;
    this.#byName.set(name, { server, tool });
    return name;
  }
}
