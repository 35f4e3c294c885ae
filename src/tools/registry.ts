/**
 * The tool registry: owns argument parsing, JSON Schema validation and dispatch. A tool problem of any
 * kind becomes a structured result for the model; nothing here throws over a tool.
 * @module
 */
import { MAX_TOOL_RESULT_CHARS } from "../config.ts";
import { errorMessage } from "../errors.ts";
import { deepFreeze } from "../_json.ts";
import type { RunEventData } from "../events.ts";
import type { ToolCall, ToolResult, ToolSchema } from "../types.ts";
import { type JsonSchema, validateJsonSchema } from "./json_schema.ts";

/** What a handler learns about the call it serves. */
export interface ToolContext {
  sessionId: string;
  /** The user the session belongs to: with `sessionId`, the session's key in the store. */
  userId: string;
  signal?: AbortSignal;
  /**
   * The id of the call being served: a tool that adds something can make a repeated call of the same id add
   * nothing (`todo` does), and so declare itself safe to repeat.
   */
  callId?: string;
  /** Reports what the call wrote to the user's memory: the `memory_write` event of its step. @default {none} */
  memoryWritten?: (data: RunEventData["memory_write"]) => void;
}

/** A tool: its schema for the model and the handler that runs it. Handlers may throw; the registry catches. */
export interface ToolSpec {
  name: string;
  description: string;
  parameters: JsonSchema;
  /** The MCP server the tool comes from; absent for the runtime's own tools. */
  server?: string;
  /**
   * True when running a call twice does no more than running it once (it only reads, or a repeated call id
   * changes nothing): a call a crash left running is then run again rather than reported as interrupted.
   * @default {false}
   */
  safeToRepeat?: boolean;
  handler(args: Record<string, unknown>, context: ToolContext): unknown | Promise<unknown>;
}

/** Longest tool name quoted whole in an error; a longer one (never a registered tool) is shown by its start. */
const MAX_QUOTED_NAME_CHARS = 64;

/** `name` as an error quotes it: whole up to {@linkcode MAX_QUOTED_NAME_CHARS}, else its start and length. */
export function quotedToolName(name: string): string {
  if (name.length <= MAX_QUOTED_NAME_CHARS) return `"${name}"`;
  return `"${name.slice(0, MAX_QUOTED_NAME_CHARS)}…" (${name.length} characters)`;
}

/** The result of a call that failed or was refused, as the model reads it. */
export function failure(error: string): ToolResult {
  return { ok: false, data: null, error, truncated: false };
}

/**
 * Tools that may change while the process runs (an MCP server's list): the registry offers `tools()` after
 * its fixed tools and reads them again whenever `version` has changed. A turn keeps the schemas it started
 * with, so a change reaches the model between turns.
 */
export interface ToolSource {
  readonly version: number;
  tools(): readonly ToolSpec[];
}

/** Options of {@linkcode ToolRegistry}. */
export interface ToolRegistryOptions {
  /** Longest serialized result handed back to the model. @default {MAX_TOOL_RESULT_CHARS} */
  maxResultChars?: number;
  /** Tools offered after the fixed ones, read again when they change. @default {[]} */
  sources?: readonly ToolSource[];
}

/** One tool as listed for people: its name, the server it comes from (null: built in), its description. */
export type ToolListing = Pick<ToolSpec, "name" | "description"> & { server: string | null };

/** Holds the tools of a run and executes calls. `execute` never throws. */
export class ToolRegistry {
  #fixed: readonly ToolSpec[];
  #sources: readonly ToolSource[];
  #versions = "";
  #tools = new Map<string, ToolSpec>();
  #schemas: readonly ToolSchema[] = [];
  #maxResultChars: number;

  constructor(tools: ToolSpec[], options: ToolRegistryOptions = {}) {
    const { maxResultChars = MAX_TOOL_RESULT_CHARS, sources = [] } = options;
    if (!(maxResultChars > 64)) throw new RangeError(`maxResultChars must be over 64, got ${maxResultChars}`);
    this.#maxResultChars = maxResultChars;
    const names = new Set<string>();
    for (const tool of tools) {
      if (names.has(tool.name)) throw new TypeError(`Cannot register tool "${tool.name}" twice`);
      names.add(tool.name);
    }
    this.#fixed = [...tools];
    this.#sources = [...sources];
    this.#current();
  }

  /** The tools by name, rebuilt when a source changed; a source's tool never displaces a fixed one. */
  #current(): Map<string, ToolSpec> {
    const versions = this.#sources.map((source) => source.version).join(",");
    if (versions === this.#versions && this.#tools.size > 0) return this.#tools;
    this.#versions = versions;
    const tools = new Map(this.#fixed.map((tool) => [tool.name, tool]));
    for (const tool of this.#sources.flatMap((source) => source.tools())) {
      if (!tools.has(tool.name)) tools.set(tool.name, tool);
    }
    this.#tools = tools;
    // Built once per change and frozen all the way (parameters copied): every request offers the same array,
    // so its JSON is serialized once.
    const schemas = [...tools.values()].map(({ name, description, parameters }) => {
      const frozen = deepFreeze(structuredClone(parameters)) as Record<string, unknown>;
      return Object.freeze({ name, description, parameters: frozen });
    });
    this.#schemas = Object.freeze(schemas);
    return tools;
  }

  /** The tools' schemas as offered to the model, in order: the same deeply frozen array until a source changes. */
  schemas(): readonly ToolSchema[] {
    this.#current();
    return this.#schemas;
  }

  /** Every tool with its server, in order, for `/tools`. */
  list(): ToolListing[] {
    return [...this.#current().values()].map(({ name, server, description }) => ({
      name,
      server: server ?? null,
      description,
    }));
  }

  /** Whether the tool `name` declares itself safe to repeat; false for a tool not registered. */
  safeToRepeat(name: string): boolean {
    return this.#current().get(name)?.safeToRepeat === true;
  }

  /**
   * Parses, validates and runs one call. Invalid JSON, a schema violation, an unknown tool or a handler that
   * throws all come back as `{ok: false, error}`; every result, error or not, is cut to the result limit.
   */
  async execute(call: ToolCall, context: ToolContext): Promise<ToolResult> {
    return this.fit(await this.#run(call, context));
  }

  /**
   * `result` cut to the result limit: what any tool message may hold. A success over it keeps a prefix of its
   * data as text, an error a prefix of its message; either is then marked `truncated`.
   */
  fit(result: ToolResult): ToolResult {
    const limit = this.#maxResultChars;
    if (serializeToolResult(result).length <= limit) return result;
    const text = result.ok ? JSON.stringify(result.data) : result.error ?? "";
    const cut = (keep: number): ToolResult =>
      result.ok
        ? { ok: true, data: text.slice(0, keep), error: null, truncated: true }
        : { ok: false, data: null, error: `${text.slice(0, keep)}…`, truncated: true };
    // Escaping makes the serialized cut longer than its text by a varying amount: search the longest prefix.
    let lo = 0;
    let hi = Math.min(text.length, limit);
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (serializeToolResult(cut(mid)).length <= limit) lo = mid;
      else hi = mid - 1;
    }
    return cut(lo);
  }

  async #run(call: ToolCall, context: ToolContext): Promise<ToolResult> {
    const tool = this.#current().get(call.name);
    // Only a failure names the tool.
    const name = () => quotedToolName(call.name);
    if (tool === undefined) {
      return failure(`Unknown tool ${name()}; available tools: ${[...this.#current().keys()].join(", ")}`);
    }
    let args: unknown;
    try {
      args = JSON.parse(call.arguments === "" ? "{}" : call.arguments);
    } catch (error) {
      return failure(`Cannot run tool ${name()}: arguments are not valid JSON (${(error as Error).message})`);
    }
    const problems = validateJsonSchema(tool.parameters, args);
    if (problems.length > 0) {
      return failure(`Cannot run tool ${name()}: invalid arguments: ${problems.join("; ")}`);
    }
    try {
      const data = await tool.handler(args as Record<string, unknown>, context);
      return { ok: true, data: data ?? null, error: null, truncated: false };
    } catch (error) {
      return failure(`Tool ${name()} failed: ${errorMessage(error)}`);
    }
  }
}

/** The content of the tool message the model reads for a result. */
export function serializeToolResult(result: ToolResult): string {
  return JSON.stringify(result);
}
