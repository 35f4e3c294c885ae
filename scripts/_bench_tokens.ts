/**
 * The bench's token section: how far each way of counting a request's tokens is from the provider's count, on a
 * corpus of conversations built here (English, Chinese, mixed, JSON tool results, code). The provider's count
 * is o200k_base (the exact tokenizer, `js-tiktoken`, as `AGENT_TOKENIZER` loads it) with OpenAI's per-message
 * accounting; the methods are characters / 4 (the old estimate), the per-script estimate, the calibrated count
 * (the provider's count of the previous request plus the per-script estimate of what was added since), and the
 * calibrated count with `AGENT_TOKENIZER=o200k_base` (what was added since counted exactly).
 * @module
 */
import { join } from "node:path";
import { estimateRequestTokens, estimateTokens, useTokenizer } from "../src/memory/plan.ts";
import { loadTokenizer } from "../src/memory/tokenizer.ts";
import type { Message } from "../src/types.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** Chinese written for this corpus: plain prose, as users write it. */
const CHINESE = [
  "今天上午我们讨论了新版本的发布计划，大家都同意先修复已知的问题，再增加新的功能。",
  "请帮我把这份会议记录整理成要点，每个要点不超过二十个字，并按重要程度排序。",
  "这个运行时把每一次模型调用都写入追加式的日志，所以出了问题以后可以一步一步地查清楚原因。",
  "如果服务器在执行工具的时候突然停止，重启以后它不会悄悄地再执行一次，而是告诉模型这个调用被中断了。",
  "我下周要去上海出差三天，帮我列一个需要准备的清单，包括衣服、文件和电子设备。",
  "会话太长的时候，旧的对话会被压缩成一个结构化的摘要，里面有目标、事实、待办事项和未解决的问题。",
  "他说这个方案的成本太高，建议我们先做一个小规模的试验，看看用户的反应再决定是否推广。",
  "天气预报说明天有大雨，出门记得带伞，路上也要注意安全，尽量不要开快车。",
  "数据库支持两种后端：单机时使用文件数据库，多副本部署时使用共享的关系数据库，并通过租约避免冲突。",
  "读完这本书以后，我最大的感受是：简单的设计往往比复杂的框架更可靠，也更容易维护。",
  "请把下面这段话翻译成英文，语气要正式一些，适合发给合作伙伴的邮件。",
  "我们的测试在一台只有两个核心的机器上运行，所以性能数字只报告中位数和比值。",
];

/** Paragraphs of `text`: blocks between blank lines, of at least 40 characters. */
function paragraphs(text: string): string[] {
  return text.split(/\n\s*\n/).map((p) => p.trim()).filter((p) => p.length >= 40);
}

function read(...parts: string[]): string {
  return Deno.readTextFileSync(join(ROOT, ...parts));
}

/** The corpus: texts of each class, from this repository and the Chinese above. */
function corpus(): Record<string, string[]> {
  const docs = [...Deno.readDirSync(join(ROOT, "docs"))].map((f) => f.name).sort();
  const english = docs.flatMap((name) => paragraphs(read("docs", name))).filter((p) => !p.includes("|"));
  const dataDocs = [...Deno.readDirSync(join(ROOT, "data/docs"))].map((f) => f.name).sort();
  const mixed = dataDocs.flatMap((name) => read("data/docs", name).split("\n"))
    .filter((line) => /[\u4e00-\u9fff]/.test(line) && /[A-Za-z]{3}/.test(line));
  const code = [
    "src/agent/loop.ts",
    "src/agent/tool_calls.ts",
    "src/memory/plan.ts",
    "src/store/sql_store.ts",
  ]
    .flatMap((path) => paragraphs(read(path)));
  const json = Array.from({ length: 40 }, (_, i) =>
    JSON.stringify({
      ok: true,
      data: i % 2 === 0 ? { expression: `${i}*(${i}+7)/3`, result: (i * (i + 7)) / 3 } : {
        todos: Array.from({ length: 1 + (i % 4) }, (_, j) => ({
          id: j + 1,
          text: ["buy milk", "call the bank", "water the plants", "book the train"][j],
          completed: j % 2 === 1,
          createdAt: `2026-0${1 + (j % 9)}-1${j}T08:${10 + i}:00.000Z`,
          completedAt: j % 2 === 1 ? "2026-02-03T09:00:00.000Z" : null,
        })),
      },
      error: null,
      truncated: false,
    }));
  return { english, chinese: CHINESE, mixed, json, code };
}

/** One conversation of `texts`: user, assistant, and every third turn a tool call with a JSON result. */
function conversation(texts: string[], json: string[], turns: number): Message[][] {
  const requests: Message[][] = [];
  const history: Message[] = [{ role: "system", content: texts[0] }];
  for (let t = 0; t < turns; t++) {
    history.push({ role: "user", content: texts[(2 * t + 1) % texts.length] });
    if (t % 3 === 2) {
      requests.push([...history]);
      const id = `call_${t}`;
      history.push({
        role: "assistant",
        content: null,
        toolCalls: [{ id, name: "todo", arguments: '{"action":"list"}' }],
      });
      history.push({ role: "tool", toolCallId: id, content: json[t % json.length] });
    }
    requests.push([...history]);
    history.push({ role: "assistant", content: texts[(2 * t + 2) % texts.length] });
  }
  return requests;
}

/** Error of `estimate` against `exact`, in percent. */
const error = (estimate: number, exact: number) => (100 * (estimate - exact)) / exact;

/** Median and largest absolute error of a list of percents. */
function summarize(errors: number[]): { medianAbsPct: number; maxAbsPct: number; count: number } {
  const abs = errors.map(Math.abs).sort((a, b) => a - b);
  const round = (n: number) => Math.round(n * 10) / 10;
  return {
    medianAbsPct: round(abs[Math.floor(abs.length / 2)] ?? 0),
    maxAbsPct: round(abs.at(-1) ?? 0),
    count: abs.length,
  };
}

/** What the token section measured, per class and for all requests. */
export type TokensResult = Record<string, Record<string, ReturnType<typeof summarize>>>;

/**
 * Measures each method on every request of the corpus's conversations (`turns` turns each, one conversation
 * per class): characters / 4, the per-script estimate on the first and on later calls, the calibrated count on
 * later calls, and the per-script estimate of each class's single texts.
 */
export async function measureTokens(turns = 12): Promise<TokensResult> {
  const tokenizer = await loadTokenizer("o200k_base");
  const count = (text: string): number => tokenizer.count(text);
  // OpenAI's accounting: each message's text and calls, 3 tokens around each, 3 priming the reply.
  const exact = (messages: Message[]) =>
    3 + messages.reduce((n, m) => {
      const calls = (m.toolCalls ?? []).map((c) => `${c.id} ${c.name} ${c.arguments}`).join(" ");
      return n + 3 + count((m.content ?? "") + (m.toolCallId ?? "") + calls);
    }, 0);
  const charsOver4 = (messages: Message[]) =>
    messages.reduce((n, m) => {
      const calls = (m.toolCalls ?? []).map((c) => c.id + c.name + c.arguments).join("");
      return n + Math.ceil((m.role + (m.content ?? "") + (m.toolCallId ?? "") + calls).length / 4);
    }, 0);
  const texts = corpus();
  const result: TokensResult = {};
  const all: Record<string, number[]> = {};
  const add = (bucket: Record<string, number[]>, key: string, value: number) =>
    (bucket[key] ??= []).push(value);
  for (const [name, list] of Object.entries(texts)) {
    const errors: Record<string, number[]> = {};
    for (const text of list) add(errors, "text: per-script", error(estimateTokens(text), count(text)));
    for (const text of list) add(errors, "text: chars/4", error(Math.ceil(text.length / 4), count(text)));
    const requests = conversation(list, texts.json, turns);
    let previous: { messages: number; tokens: number } | null = null;
    for (const request of requests) {
      const truth = exact(request);
      const when = previous === null ? "first call" : "later calls";
      add(errors, `request, ${when}: chars/4`, error(charsOver4(request), truth));
      add(errors, `request, ${when}: per-script`, error(estimateRequestTokens(request), truth));
      if (previous === null) {
        useTokenizer(tokenizer);
        add(errors, "request, first call: AGENT_TOKENIZER", error(estimateRequestTokens(request), truth));
        useTokenizer(null);
      }
      if (previous !== null) {
        const added = request.slice(previous.messages);
        add(
          errors,
          "request, later calls: calibrated",
          error(previous.tokens + estimateRequestTokens(added), truth),
        );
        useTokenizer(tokenizer);
        const exactly = previous.tokens + estimateRequestTokens(added);
        useTokenizer(null);
        add(errors, "request, later calls: calibrated, AGENT_TOKENIZER", error(exactly, truth));
      }
      previous = { messages: request.length, tokens: truth };
    }
    result[name] = Object.fromEntries(Object.entries(errors).map(([k, v]) => [k, summarize(v)]));
    for (const [k, v] of Object.entries(errors)) for (const e of v) add(all, k, e);
  }
  result.all = Object.fromEntries(Object.entries(all).map(([k, v]) => [k, summarize(v)]));
  return result;
}
