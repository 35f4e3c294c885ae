/**
 * The bench's fake OpenAI-compatible provider, run as its own process:
 * `deno run --allow-net=127.0.0.1 scripts/_bench_provider.ts [LATENCY_MS]`. It prints its port, then answers
 * by rule after LATENCY_MS (default 0): the summary prompt gets a valid summary, a tool result an answer
 * quoting it, arithmetic a `calculator` call, anything else an echo. `GET /stats` counts the requests by
 * kind. It exits on SIGTERM, SIGINT, or when stdin closes.
 * @module
 */
import { SUMMARY_PROMPT } from "../src/memory/summarizer.ts";

type Kind = "tool_call" | "answer" | "summary" | "echo";
interface WireMessage {
  role: string;
  content: string | null;
}

const EXPRESSION = /[-+*/%().\d\s]*\d[-+*/%().\d\s]*[+*/%-][-+*/%().\d\s]*\d[)\s]*/;
const RESULT = /"result":(-?[\d.eE+-]+)/g;

/** The reply to a request body, and its kind. Pure. */
export function answer(body: Record<string, unknown>): { kind: Kind; message: Record<string, unknown> } {
  const messages = (Array.isArray(body.messages) ? body.messages : []) as WireMessage[];
  const last = messages.at(-1);
  if (messages[0]?.role === "system" && messages[0].content === SUMMARY_PROMPT) {
    // Keep the newest calculator result being cut, as a model would keep a result worth keeping.
    const results = [...(last?.content ?? "").matchAll(RESULT)];
    const fact = results.length > 0
      ? `The calculator returned ${results.at(-1)![1]}.`
      : "The user asked arithmetic questions.";
    const summary = { goals: [], facts: [fact], todos: [], unresolved: [] };
    return { kind: "summary", message: { role: "assistant", content: JSON.stringify(summary) } };
  }
  if (last?.role === "tool") {
    let text = "The tool result was not readable.";
    try {
      const result = JSON.parse(last.content ?? "{}");
      text = result.ok ? `The answer is ${result.data.result}.` : `The tool failed: ${result.error}`;
    } catch {
      // The default text says so.
    }
    return { kind: "answer", message: { role: "assistant", content: text } };
  }
  const expression = EXPRESSION.exec(last?.content ?? "");
  if (expression !== null) {
    const args = JSON.stringify({ expression: expression[0].trim() });
    const call = {
      id: `call_${messages.length}`,
      type: "function",
      function: { name: "calculator", arguments: args },
    };
    return { kind: "tool_call", message: { role: "assistant", content: null, tool_calls: [call] } };
  }
  return { kind: "echo", message: { role: "assistant", content: `echo: ${last?.content ?? ""}` } };
}

/** A chat.completion body carrying `message`, usage estimated from the prompt's characters. */
export function completion(model: string, message: Record<string, unknown>, promptChars: number) {
  const prompt = Math.ceil(promptChars / 4);
  const reply = Math.ceil(JSON.stringify(message).length / 4);
  return {
    id: `chatcmpl-bench-${crypto.randomUUID()}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message, finish_reason: message.tool_calls ? "tool_calls" : "stop" }],
    usage: { prompt_tokens: prompt, completion_tokens: reply, total_tokens: prompt + reply },
  };
}

if (import.meta.main) {
  const latencyMs = Number(Deno.args[0] ?? 0);
  const stats: Record<Kind | "requests", number> = {
    requests: 0,
    tool_call: 0,
    answer: 0,
    summary: 0,
    echo: 0,
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    if (request.method === "GET") return Response.json(stats);
    const text = await request.text();
    const body = JSON.parse(text);
    const { kind, message } = answer(body);
    stats.requests++;
    stats[kind]++;
    if (latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, latencyMs));
    return Response.json(completion(String(body.model), message, text.length));
  });
  for (const signal of ["SIGTERM", "SIGINT"] as const) Deno.addSignalListener(signal, () => Deno.exit(0));
  console.log(String(server.addr.port));
  // Input is ignored: only its end matters (the parent is gone or done).
  await Deno.stdin.readable.pipeTo(new WritableStream()).catch(() => {});
  Deno.exit(0);
}
