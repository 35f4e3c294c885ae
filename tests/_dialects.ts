/** The provider dialect fixtures (tests/fixtures/dialects/) and a loopback provider that replays one. */

/** Where the dialect fixtures are. */
export const DIALECTS = new URL("./fixtures/dialects/", import.meta.url);

/** The string every fixture's reasoning carries: it must reach no message, event, delta or request. */
export const MARKER = "SECRET-REASONING";

/** One reply of a fixture: its stream (`data:` payloads, "[DONE]" as is) and its non-streamed body. */
export interface DialectReply {
  stream: unknown[];
  body: unknown;
}

/** A tool call as the runtime should assemble it. */
export interface ExpectedCall {
  id: string;
  name: string;
  arguments: string;
}

/** One provider's dialect: a tool-call reply, then an answer, and what the runtime must make of them. */
export interface Dialect {
  /** The file name without `.json`. */
  name: string;
  provider: string;
  replies: DialectReply[];
  expect: {
    /** The text of the tool-call reply (null when it has none). */
    call_text: string | null;
    calls: ExpectedCall[];
    answer: string;
    /** prompt, completion and total tokens of each reply. */
    usage: [number, number, number][];
    /** The prompt tokens each reply says the provider read from its cache; null where it does not say. */
    cached: (number | null)[];
  };
}

/** Every fixture, sorted by name. */
export function readDialects(): Dialect[] {
  return [...Deno.readDirSync(DIALECTS)]
    .map((entry) => entry.name)
    .filter((name) => name.endsWith(".json"))
    .sort()
    .map((file) => ({
      name: file.slice(0, -".json".length),
      ...JSON.parse(Deno.readTextFileSync(new URL(file, DIALECTS))),
    }));
}

/** A provider on 127.0.0.1 that replays fixture replies, and the request bodies it received, as sent. */
export interface ReplayProvider {
  /** The base URL, `http://127.0.0.1:<port>/v1`. */
  url: string;
  requests: string[];
  close(): Promise<void>;
}

/**
 * Answers the n-th request with the n-th reply: its stream as Server-Sent Events when the request asks for
 * `stream`, else its body as JSON. A request past the last reply gets a 400.
 */
export function replayProvider(replies: readonly DialectReply[]): ReplayProvider {
  const requests: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const text = await request.text();
    requests.push(text);
    const reply = replies[requests.length - 1];
    if (reply === undefined) {
      return Response.json({ error: { message: "the fixture has no more replies" } }, { status: 400 });
    }
    if (JSON.parse(text).stream !== true) return Response.json(reply.body);
    const frames = reply.stream.map((data) =>
      `data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`
    );
    return new Response(frames.join(""), { headers: { "content-type": "text/event-stream" } });
  });
  return { url: `http://127.0.0.1:${server.addr.port}/v1`, requests, close: () => server.shutdown() };
}
