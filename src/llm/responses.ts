/**
 * OpenAI Responses (`LLM_API=responses`). Skeleton: replaced by the dialect.
 * @module
 */
import type { Dialect } from "./dialect.ts";
import { CHAT_COMPLETIONS } from "./stream.ts";

/** OpenAI Responses: `POST {baseUrl}/responses`. */
export const OPENAI_RESPONSES: Dialect = { ...CHAT_COMPLETIONS, path: "/responses" };
