/**
 * The acceptance demo's offline model: rules decide every reply from the request alone (never a script), so
 * the demo exercises the real loop, tools, store and compaction, answering only from what the runtime sent.
 * @module
 */
import { LlmError } from "../errors.ts";
import { estimateRequestTokens, estimateTokens } from "../memory/plan.ts";
import { parseSummary, RUNTIME_CONTEXT_HEADER } from "../memory/summary.ts";
import type { ChatReply, Message, ToolCall } from "../types.ts";
import type { ChatOptions, LLM } from "../llm/llm.ts";

/** The `model` name the demo model reports in replies (and so in the trace's `llm_call` events). */
export const DEMO_MODEL_NAME = "demo-rules";

/** Options of {@linkcode DemoModel}. */
export interface DemoModelOptions {
  /**
   * Recall from the [RUNTIME CONTEXT] blocks too, the summary and the `user_memory` (`false` fails the memory
   * phases). @default {true}
   */
  readRuntimeContext?: boolean;
}

/** What a user can ask the model to remember (`statement`'s group 1), and how the answer is worded. */
interface RecallQuestion {
  asks: RegExp;
  statement: RegExp;
  known: (value: string) => string;
  unknown: string;
}

const RECALL: readonly RecallQuestion[] = [
  {
    asks: /\bwhat(?:'s| is) my favou?rite colou?r\b/i,
    statement: /\bfavou?rite colou?r is ([\p{L}-]+)/iu,
    known: (value) => `Your favourite colour is ${value}.`,
    unknown: "I don't know your favourite colour.",
  },
  {
    asks: /\bwhat(?:'s| is) (?:my project called|the name of my project|my project's name)\b/i,
    statement: /\bproject is called ([\p{L}\p{N}_-]+)/iu,
    known: (value) => `Your project is called ${value}.`,
    unknown: "I don't know what your project is called.",
  },
];

const ADD_TODO = /\b(?:add (?:a )?todo|remind me to)\b[\s:,-]*(?:to\s+)?(.+)$/is;
const LIST_TODOS = /\b(?:(?:list|show) (?:me )?(?:my |the )?todos|what are my todos)\b/i;
const SEARCH_DOCS = /\bsearch (?:the )?docs? (?:for|about) (.+)$/is;
/** A greeting, or a question about the model itself: answered with what it can do. */
const INTRODUCE =
  /^(?:hi|hello|hey|hallo|good (?:morning|afternoon|evening)|help)\b|\b(?:who are you|what can you do|what are you)\b/i;

/** What the demo model says about itself: it is rules, not an LLM, and what it understands. */
export const DEMO_CAPABILITIES = "I am the offline demo model: rules, not an LLM. I can do arithmetic " +
  '("what is 12*(3+4)?"), keep todos ("add a todo to buy milk", "list my todos"), search the docs ' +
  '("search the docs for compaction") and remember your favourite colour or what your project is called. ' +
  "For real answers, set OPENAI_BASE_URL and MODEL (and OPENAI_API_KEY for a hosted provider).";

/** Runs of characters an arithmetic expression is made of; the longest one with an operation wins. */
const EXPRESSION_CHARS = /[\d.+\-*/%()\s]+/g;
const HAS_OPERATION = /\d[\s)]*(?:\*\*|[-+*/%])[\s(+-]*[\d.(]/;

/** A reply before the model fills in ids and usage. */
interface Decision {
  content?: string;
  call?: { name: string; arguments: Record<string, unknown> };
}

/** The longest arithmetic expression in `text`, or null when it holds none. */
export function extractExpression(text: string): string | null {
  let best: string | null = null;
  for (const [run] of text.matchAll(EXPRESSION_CHARS)) {
    const candidate = run.trim().replace(/[.\s]+$/, "");
    if (HAS_OPERATION.test(candidate) && candidate.length > (best?.length ?? 0)) best = candidate;
  }
  return best;
}

function lastUserText(messages: readonly Message[]): string {
  return messages.findLast((m) => m.role === "user")?.content ?? "";
}

/**
 * Where a remembered value may be: user messages (newest first), then the summary's facts and goals, then the
 * items recalled from the user's memory (`user_memory`).
 */
function evidence(messages: readonly Message[], readRuntimeContext: boolean): string[] {
  const texts = messages.filter((m) => m.role === "user").map((m) => m.content ?? "").reverse();
  if (!readRuntimeContext) return texts;
  // The summary's block comes before the history, the recall's after it.
  const blocks = messages.filter((m) => m.role === "system" && m.content?.startsWith(RUNTIME_CONTEXT_HEADER));
  const jsons = blocks.map(({ content }) =>
    content!.includes("{") ? content!.slice(content!.indexOf("{")) : null
  );
  for (const summary of jsons.map(parseSummary)) {
    if (summary !== null) texts.push(...summary.facts, ...summary.goals);
  }
  return [...texts, ...jsons.flatMap(recalledItems)];
}

/** The texts of the block's `user_memory`; none when the block has no such list or is not JSON. */
function recalledItems(json: string | null): string[] {
  if (json === null) return [];
  try {
    const items = (JSON.parse(json) as { user_memory?: unknown }).user_memory;
    return Array.isArray(items) ? items.map((item) => String(item?.text ?? "")) : [];
  } catch {
    return [];
  }
}

/** The answers to the recall questions `question` asks, each found in the request or admitted unknown. */
function recallAnswers(
  question: string,
  messages: readonly Message[],
  readRuntimeContext: boolean,
): string[] {
  const sources = evidence(messages, readRuntimeContext);
  return RECALL.filter((r) => r.asks.test(question)).map((r) => {
    for (const text of sources) {
      const match = r.statement.exec(text);
      if (match) return r.known(match[1]);
    }
    return r.unknown;
  });
}

/** One sentence about one tool result, worded from the result's data. */
function describeResult(call: ToolCall, content: string | null): string {
  let result: { ok?: boolean; data?: Record<string, unknown> | string | null; error?: string | null };
  try {
    result = JSON.parse(content ?? "");
  } catch {
    return `The ${call.name} tool returned something I cannot read.`;
  }
  if (result.ok !== true) return `The ${call.name} tool failed: ${result.error ?? "no reason given"}.`;
  const data = result.data;
  if (typeof data !== "object" || data === null) return `The ${call.name} tool returned a cut result.`;
  if (call.name === "calculator") return `${data.expression} = ${data.result}`;
  if (call.name === "search_mock") {
    const [hit] = (data.results ?? []) as { title: string; snippet: string }[];
    return hit === undefined
      ? "The docs have nothing on that."
      : `The docs say (${hit.title}): ${hit.snippet}`;
  }
  if (call.name === "todo" && Array.isArray(data.todos)) {
    const todos = data.todos as { id: number; text: string; completed: boolean }[];
    if (todos.length === 0) return "You have no todos.";
    return `Your todos: ${todos.map((t) => `#${t.id} ${t.text}${t.completed ? " (done)" : ""}`).join("; ")}.`;
  }
  if (call.name === "todo") {
    const todo = data.todo as { id: number; text: string; completed: boolean };
    return todo.completed ? `Marked todo #${todo.id} as done.` : `Added todo #${todo.id}: ${todo.text}.`;
  }
  return `The ${call.name} tool returned ${JSON.stringify(data)}.`;
}

/** The answer after the tool results that end the request, plus any recall the user also asked for. */
function answerFromTools(messages: readonly Message[], readRuntimeContext: boolean): Decision {
  const index = messages.findLastIndex((m) => m.role === "assistant" && (m.toolCalls?.length ?? 0) > 0);
  const results = messages.slice(index + 1).filter((m) => m.role === "tool");
  const parts = (messages[index]?.toolCalls ?? []).map((call) => {
    const result = results.find((m) => m.toolCallId === call.id);
    return result === undefined
      ? `The ${call.name} tool gave no result.`
      : describeResult(call, result.content);
  });
  parts.push(...recallAnswers(lastUserText(messages), messages, readRuntimeContext));
  return { content: parts.join(" ") };
}

/** What to do about the last user message: call a tool the rules ask for and the request offers, or answer. */
function decide(messages: readonly Message[], offered: ReadonlySet<string>, readContext: boolean): Decision {
  if (messages.at(-1)?.role === "tool") return answerFromTools(messages, readContext);
  const text = lastUserText(messages).trim();
  const want = (name: string, args: Record<string, unknown>): Decision =>
    offered.has(name)
      ? { call: { name, arguments: args } }
      : { content: `I would need the ${name} tool for that, and it is not available.` };

  // Todo texts may hold numbers and dates, so todo requests are recognised before arithmetic.
  const add = ADD_TODO.exec(text);
  if (add) return want("todo", { action: "add", text: add[1].trim().replace(/[.!]+$/, "") });
  if (LIST_TODOS.test(text)) return want("todo", { action: "list" });
  const search = SEARCH_DOCS.exec(text);
  if (search) return want("search_mock", { query: search[1].trim().replace(/[.?!]+$/, "") });
  const expression = extractExpression(text);
  if (expression !== null) return want("calculator", { expression });
  const recalled = recallAnswers(text, messages, readContext);
  if (recalled.length > 0) return { content: recalled.join(" ") };
  if (INTRODUCE.test(text)) return { content: DEMO_CAPABILITIES };
  return { content: text.endsWith("?") ? `I can't answer that. ${DEMO_CAPABILITIES}` : "Noted." };
}

/**
 * A deterministic rule-based {@linkcode LLM}: it answers from tool results ending the request; else calls
 * `calculator` for arithmetic, `todo` for "add a todo …" / "remind me to …" / "list my todos", `search_mock`
 * for "search the docs for …", answers recall questions, or says what it can do (to a greeting or a question it
 * has no rule for). Usage is estimated from the request's size.
 * Rejects only with an `LlmError` of kind `aborted`. Not a summarizer (use `deterministicSummarizer`).
 */
export class DemoModel implements LLM {
  #readRuntimeContext: boolean;
  #calls = 0;

  constructor(options: DemoModelOptions = {}) {
    const { readRuntimeContext = true } = options;
    this.#readRuntimeContext = readRuntimeContext;
  }

  chat(messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    const { tools = [], signal } = options;
    if (signal?.aborted) return Promise.reject(new LlmError("LLM request aborted", { kind: "aborted" }));
    const decision = decide(messages, new Set(tools.map((t) => t.name)), this.#readRuntimeContext);
    this.#calls++;
    const toolCalls: ToolCall[] = decision.call === undefined ? [] : [{
      id: `demo_call_${this.#calls}`,
      name: decision.call.name,
      arguments: JSON.stringify(decision.call.arguments),
    }];
    const content = decision.content ?? null;
    const promptTokens = estimateRequestTokens(messages, tools);
    const completionTokens = estimateTokens((content ?? "") + (toolCalls[0]?.arguments ?? ""));
    return Promise.resolve({
      content,
      toolCalls,
      usage: {
        promptTokens,
        completionTokens,
        totalTokens: promptTokens + completionTokens,
        cachedTokens: null,
      },
      model: DEMO_MODEL_NAME,
    });
  }
}
