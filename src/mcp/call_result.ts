/**
 * toolData(): an MCP `tools/call` result as the data of the runtime's tool result. Text and structured
 * content are kept; images, audio and resources become a short note, since the model reads text only.
 * @module
 */

/** One content block of a call result, loosely typed: servers may send kinds newer than this client. */
interface ContentBlock {
  type: string;
  text?: string;
  mimeType?: string;
  data?: string;
  uri?: string;
  name?: string;
  resource?: { uri?: string; mimeType?: string; text?: string; blob?: string };
}

/** The parts of a call result read here. */
export interface CallResult {
  content?: unknown;
  structuredContent?: unknown;
  isError?: boolean;
}

function note(block: ContentBlock): string {
  switch (block.type) {
    case "text":
      return block.text ?? "";
    case "image":
    case "audio": {
      const bytes = Math.floor(((block.data ?? "").length * 3) / 4);
      return `[${block.type} ${block.mimeType ?? "of unknown type"}, ${bytes} bytes, not shown]`;
    }
    case "resource_link":
      return `[resource link ${block.uri ?? "?"}${block.name ? ` (${block.name})` : ""}]`;
    case "resource": {
      const resource = block.resource ?? {};
      if (typeof resource.text === "string") return `[resource ${resource.uri ?? "?"}]\n${resource.text}`;
      return `[resource ${resource.uri ?? "?"} ${resource.mimeType ?? "binary"}, not shown]`;
    }
    default:
      return `[${block.type} content, not shown]`;
  }
}

/** The result's content as text: text blocks as they are, other blocks as notes, one per line. */
export function contentText(result: CallResult): string {
  const blocks = Array.isArray(result.content) ? result.content as ContentBlock[] : [];
  return blocks.filter((block) => typeof block === "object" && block !== null).map(note).join("\n");
}

/**
 * The data the model reads for a successful call: the content's text alone, or `{text, structured}` when the
 * server also sent structured content. Pure; never throws.
 */
export function toolData(result: CallResult): unknown {
  const text = contentText(result);
  if (result.structuredContent === undefined || result.structuredContent === null) return text;
  return { text, structured: result.structuredContent };
}
