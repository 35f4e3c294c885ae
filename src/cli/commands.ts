/**
 * The REPL's slash commands: what each does, its help line and its Tab completion. Commands read the store
 * and the chat's state; only `/new` and `/switch` change which session the next turn goes to, and `/rename`
 * the session's title (in the store, so the page and every client see it).
 * @module
 */
import { SessionError } from "../errors.ts";
import { parseSummary, SUMMARY_FIELDS } from "../memory/summary.ts";
import { shorten } from "../shorten.ts";
import { type MemoryItem, type SessionKey, type SessionStore, validateId } from "../store/store.ts";
import type { ToolRegistry } from "../tools/registry.ts";
import type { StoredMessage, Usage, UsageEntry } from "../types.ts";
import { plural } from "./render.ts";
import { costOf, type PriceTable } from "../prices.ts";
// The page's formatter, pure: chat and the page write a cost alike.
import { formatCost } from "../text/cost.js";

/** What the commands read and change: the current session, and the last turn's tokens. */
export interface ChatState {
  sessionId: string;
  readonly userId: string;
  /** The tokens of this process's last turn, as its provider reported them, and the session it ran in. */
  lastTurn: (Usage & { sessionId: string }) | null;
  /** The model in use, when known. */
  model?: string;
}

/** What a command may do besides reading the state. */
export interface CommandContext {
  state: ChatState;
  store: SessionStore;
  /** Dollars per million tokens by model: `/usage` adds the session's cost. @default {undefined} (no cost) */
  prices?: PriceTable;
  /** The tools `/tools` lists. @default {undefined} (none to list) */
  tools?: ToolRegistry;
  /** Shows `text` as one or more lines. */
  write(text: string): void;
  clearScreen(): void;
  /** Swaps the model for the rest of the process; absent when it cannot be changed. */
  setModel?: (name: string) => void;
  /** An id for `/new` without one. */
  newSessionId(): string;
}

/** `done`: the command was answered; `retry`: run the unanswered message again; `exit`: leave. */
export type CommandOutcome = "done" | "retry" | "exit";

const COMMANDS: [name: string, args: string, help: string][] = [
  ["/help", "", "show this help"],
  ["/new", "[id]", "start a new session (a generated id if none is given)"],
  ["/sessions", "", "list your sessions with their turn counts, last use and titles"],
  ["/switch", "<id>", "continue another of your sessions"],
  ["/rename", "<title>", "rename this session (no title: name it from its first question again)"],
  ["/session", "", "show the session id, user and turn count"],
  ["/history", "[n]", "show the last n exchanges of this session (default 5), tool calls in brief"],
  ["/summary", "", "show this session's compacted memory (what [RUNTIME CONTEXT] tells the model)"],
  ["/todos", "", "list this session's todos"],
  ["/memory", "", "list your memory across sessions (what the model may recall), with ids"],
  ["/forget", "<id>", "erase one item of your memory (/forget all: all of it); sessions stay"],
  ["/tools", "", "list every tool the model may call, with its MCP server (built-in: the runtime's own)"],
  ["/usage", "", "tokens of this session (as stored, every process's turns) and of the last turn"],
  ["/model", "<name>", "use another model for the rest of this process (no name: show it)"],
  ["/retry", "", "run the last unanswered message again (after an error), without sending it twice"],
  ["/clear", "", "clear the screen (Ctrl-L too)"],
  ["/exit", "", "leave (Ctrl-D, or Ctrl-C twice on an empty line)"],
];

/** The commands and key bindings, as `/help` shows them. */
export const REPL_HELP = `Commands:\n${
  COMMANDS.map(([name, args, help]) => `  ${`${name} ${args}`.padEnd(16)}${help}`).join("\n")
}
Keys: Enter sends; Alt+Enter or Ctrl+J adds a line; a line of """ starts a block, another ends it; a paste
is one message; Up/Down recall earlier input; Tab completes commands and session ids; Ctrl-C clears the line
(or cancels a running turn); Ctrl-L clears the screen.`;

/** Whether `line` is meant as a command: one line starting with `/word` (a path like /etc/hosts is not). */
export function isCommand(line: string): boolean {
  return /^\/[a-z]+(\s|$)/.test(line) && !line.includes("\n");
}

/** Makes a turn's tokens, as its provider reported them, the last turn's, in the current session. */
export function recordUsage(state: ChatState, usage: Usage): void {
  state.lastTurn = { ...usage, sessionId: state.sessionId };
}

/**
 * The session's tokens as the store counted them, every process's turns: "1,150 tokens (1,100 prompt, 800 of
 * them cached, + 50 completion) over 2 model calls" (the cached and cache-written ones only when there are),
 * with how many calls were estimated.
 */
function storedTokens(rows: readonly UsageEntry[], prices?: PriceTable): string {
  const fields = [
    "promptTokens",
    "cachedTokens",
    "cacheWriteTokens",
    "completionTokens",
    "calls",
    "estimatedCalls",
  ] as const;
  const [prompt, cached, written, completion, calls, estimated] = fields.map((f) =>
    rows.reduce((n, r) => n + r[f], 0)
  );
  if (calls === 0) return "no model calls yet";
  const guessed = estimated > 0 ? `; ${plural(estimated, "call")} without counts, estimated` : "";
  const cost = prices === undefined || prices.size === 0 ? "" : `, ${costText(costOf(prices, rows))}`;
  return `${plural(prompt + completion, "token")} (${
    countsText(prompt, cached, written, completion)
  }) over ` +
    `${plural(calls, "model call")}${guessed}${cost}`;
}

/**
 * "1,100 prompt + 50 completion", with ", 800 of them cached," when the provider read some from its cache, and
 * ", 200 written to the cache," after it (", 200 of them written to the cache," alone) when it wrote some.
 */
function countsText(prompt: number, cached: number, written: number, completion: number): string {
  const count = (n: number) => n.toLocaleString("en-US");
  const read = cached > 0 ? `, ${count(cached)} of them cached` : "";
  const wrote = written > 0 ? `, ${count(written)} ${read === "" ? "of them " : ""}written to the cache` : "";
  const of = read + wrote === "" ? "" : `${read}${wrote},`;
  return `${count(prompt)} prompt${of} + ${count(completion)} completion`;
}

function costText(dollars: number | null): string {
  return dollars === null ? "cost unknown (a model has no price in AGENT_PRICES)" : formatCost(dollars);
}

/** "session s (user u), 3 turns". */
export async function describeSession(store: SessionStore, key: SessionKey): Promise<string> {
  const session = await store.get(key);
  return `session ${key.sessionId} (user ${key.userId}), ${plural(session?.turnCount ?? 0, "turn")}`;
}

function tokens(usage: Usage): string {
  if (usage.totalTokens === null) return "tokens not reported by the provider";
  const { promptTokens, cachedTokens, cacheWriteTokens, completionTokens } = usage;
  const counts = countsText(
    promptTokens ?? 0,
    cachedTokens ?? 0,
    cacheWriteTokens ?? 0,
    completionTokens ?? 0,
  );
  return `${plural(usage.totalTokens, "token")} (${counts})`;
}

/** Runs a line for which {@linkcode isCommand} holds. Never throws for a bad argument: it says so. */
export async function runCommand(line: string, context: CommandContext): Promise<CommandOutcome> {
  const name = line.trim().split(/\s+/)[0];
  if (name === "/exit" || name === "/quit") return "exit";
  if (name === "/retry") return "retry";
  if (name === "/clear") context.clearScreen();
  else context.write(await answer(line, context));
  return "done";
}

/** What a command other than `/exit`, `/retry` and `/clear` answers. */
async function answer(line: string, context: CommandContext): Promise<string> {
  const [name, ...args] = line.trim().split(/\s+/);
  const arg = args[0];
  const { state, store } = context;
  const key = { userId: state.userId, sessionId: state.sessionId };
  switch (name) {
    case "/help":
      return REPL_HELP;
    case "/session":
      return await describeSession(store, key);
    case "/todos": {
      const todos = await store.listTodos(key);
      return todos.length === 0
        ? "no todos in this session"
        : todos.map((t) => `  ${t.completed ? "[x]" : "[ ]"} ${t.id}. ${t.text}`).join("\n");
    }
    case "/memory":
      return memoryText(await store.listMemory(state.userId));
    case "/forget":
      return await forget(store, state.userId, arg);
    case "/tools":
      return toolsText(context.tools);
    case "/new":
    case "/switch":
      return await changeSession(name, arg, context);
    case "/sessions":
      return await listSessions(store, state);
    case "/rename":
      return await rename(store, key, line.trim().slice(name.length));
    case "/history": {
      const n = arg === undefined ? 5 : Number(arg);
      if (!Number.isInteger(n) || n < 1) return `Cannot show history: n must be a whole number of 1 or more`;
      return await history(store, key, n);
    }
    case "/summary":
      return summaryText((await store.get(key))?.summary ?? null);
    case "/usage": {
      const stored = storedTokens(await store.sessionUsage(key), context.prices);
      // After /switch, the last turn of the session left is not this one's.
      const last = state.lastTurn?.sessionId === state.sessionId ? state.lastTurn : null;
      return `this session (${state.sessionId}): ${stored}, as stored (every process's turns)\n` +
        `last turn: ${last ? tokens(last) : "none yet in this session"}`;
    }
    case "/model":
      return changeModel(arg, context);
    default:
      return `Unknown command ${name}; /help lists the commands.`;
  }
}

async function changeSession(
  name: string,
  arg: string | undefined,
  context: CommandContext,
): Promise<string> {
  const { state, store } = context;
  if (name === "/switch" && arg === undefined) {
    return "Cannot switch: give a session id (/sessions lists them)";
  }
  const id = arg ?? context.newSessionId();
  try {
    validateId(id);
  } catch (error) {
    if (error instanceof SessionError) return error.message;
    throw error;
  }
  const target = { userId: state.userId, sessionId: id };
  const existing = await store.get(target);
  if (name === "/new" && existing !== null) return `Session ${id} already exists; /switch ${id} continues it`;
  if (name === "/switch" && existing === null) return `You have no session ${id}; /new ${id} starts it`;
  if (existing === null) await store.getOrCreate(target);
  state.sessionId = id;
  return `now in ${await describeSession(store, target)}`;
}

async function listSessions(store: SessionStore, state: ChatState): Promise<string> {
  const sessions = await store.listSessions(state.userId);
  if (sessions.length === 0) return "no sessions yet";
  const width = Math.max(...sessions.map((s) => s.id.length));
  return `sessions of ${state.userId}, most recently used first (times in UTC):\n` +
    sessions.map((s) =>
      `${s.id === state.sessionId ? "* " : "  "}${s.id.padEnd(width)}  ${
        plural(s.turnCount, "turn").padEnd(10)
      }` +
      `  last used ${s.updatedAt.slice(0, 16).replace("T", " ")}` +
      (s.title === null ? "" : `  ${s.title}`)
    ).join("\n");
}

/** Gives the current session `title` (blank: its first question's), as the page's rename does. */
async function rename(store: SessionStore, key: SessionKey, title: string): Promise<string> {
  try {
    // Not stored before its first turn: there is nothing to rename yet.
    const session = await store.get(key) === null ? null : await store.renameSession(key, title);
    if (session === null) return `Cannot rename session ${key.sessionId}: it has no turns yet`;
    return session.title === null
      ? `session ${session.id} has no title until its first question`
      : `session ${session.id} is now titled: ${session.title}`;
  } catch (error) {
    if (error instanceof RangeError || error instanceof TypeError) return error.message;
    throw error;
  }
}

/** The last `n` exchanges: the question, each tool call in brief, the answer. */
async function history(store: SessionStore, key: SessionKey, n: number): Promise<string> {
  const exchanges: StoredMessage[][] = [];
  for (const message of await store.messages(key)) {
    if (message.role === "user") exchanges.push([message]);
    else exchanges.at(-1)?.push(message);
  }
  const session = await store.get(key);
  const folded = session && session.compactedTurns > 0
    ? ` (${plural(session.compactedTurns, "earlier turn")} folded into the summary: /summary)`
    : "";
  if (exchanges.length === 0) return `no exchanges in this session${folded}`;
  const shown = exchanges.slice(-n);
  const lines = [`last ${shown.length} of ${plural(exchanges.length, "exchange")}${folded}:`];
  for (const exchange of shown) {
    lines.push(`you> ${shorten(exchange[0].content ?? "", 200, { oneLine: true })}`);
    for (const call of exchange.flatMap((m) => m.toolCalls ?? [])) {
      lines.push(`  ↳ ${call.name}(${shorten(call.arguments, 80, { oneLine: true })})`);
    }
    const answer = exchange.findLast((m) => m.role === "assistant" && m.content);
    lines.push(`agent> ${answer ? shorten(answer.content!, 300, { oneLine: true }) : "(no answer)"}`);
  }
  return lines.join("\n");
}

/** One line per tool: its name, where it comes from, and the first line of its description. */
function toolsText(tools: ToolRegistry | undefined): string {
  const listed = tools?.list() ?? [];
  if (listed.length === 0) return "no tools";
  const width = Math.max(...listed.map((tool) => tool.name.length));
  const from = (server: string | null) => server === null ? "built-in" : `MCP ${server}`;
  const origin = Math.max(...listed.map((tool) => from(tool.server).length));
  return `${plural(listed.length, "tool")}:\n` +
    listed.map((tool) =>
      `  ${tool.name.padEnd(width)}  ${from(tool.server).padEnd(origin)}  ${
        shorten(tool.description.split("\n")[0], 80, { oneLine: true })
      }`
    ).join("\n");
}

function summaryText(stored: string | null): string {
  const summary = parseSummary(stored);
  if (summary === null) return "no summary yet: nothing of this session has been compacted";
  const fields = SUMMARY_FIELDS.map((field) =>
    summary[field].length === 0
      ? `${field}: (none)`
      : `${field}:\n${summary[field].map((item) => `  - ${item}`).join("\n")}`
  );
  return `[RUNTIME CONTEXT] summary, updated ${summary.updated_at || "(unknown)"}:\n${fields.join("\n")}`;
}

/** One line per item: its id, text, and where and when it was last seen. */
function memoryText(items: readonly MemoryItem[]): string {
  if (items.length === 0) return "no memory yet: compaction and the remember tool keep facts here";
  const width = Math.max(...items.map((item) => String(item.id).length));
  return `${plural(items.length, "item")} of memory, oldest first (/forget <id> erases one):\n` +
    items.map((item) =>
      `  ${String(item.id).padStart(width)}. ${shorten(item.text, 200, { oneLine: true })}  ` +
      `(from ${item.sourceSession ?? "a tool"}, seen ${item.lastSeen.slice(0, 16).replace("T", " ")}, ` +
      `recalled ${plural(item.useCount, "time")})`
    ).join("\n");
}

async function forget(store: SessionStore, userId: string, arg: string | undefined): Promise<string> {
  if (arg === "all") return `forgot ${plural(await store.forgetMemory(userId), "item")} of your memory`;
  const id = Number(arg);
  if (arg === undefined || !/^\d+$/.test(arg) || !Number.isSafeInteger(id)) {
    return "Cannot forget: give an item id (/memory lists them) or all";
  }
  return await store.forgetMemory(userId, id) === 1
    ? `forgot item ${id}`
    : `Cannot forget item ${id}: you have no such item (/memory lists them)`;
}

function changeModel(name: string | undefined, context: CommandContext): string {
  const { state } = context;
  if (name === undefined) return `model: ${state.model ?? "(unknown)"}`;
  if (context.setModel === undefined) return "Cannot change the model here";
  context.setModel(name);
  state.model = name;
  return `model is now ${name} for the rest of this process (MODEL sets it for good)`;
}

/** Whole-line completions for Tab: command names, and session ids after `/switch `. */
export async function completeCommand(line: string, store: SessionStore, userId: string): Promise<string[]> {
  if (!line.startsWith("/")) return [];
  const space = line.indexOf(" ");
  if (space === -1) {
    return COMMANDS.filter(([name]) => name.startsWith(line)).map(([name, args]) => args ? `${name} ` : name);
  }
  if (line.slice(0, space) !== "/switch") return [];
  const prefix = line.slice(space + 1);
  const sessions = await store.listSessions(userId);
  return sessions.filter((s) => s.id.startsWith(prefix)).map((s) => `/switch ${s.id}`);
}
