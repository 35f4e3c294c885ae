/**
 * `PATCH /v1/sessions/{id}`: renames the caller's session. The title is kept in the store, so every client of
 * the user sees it.
 * @module
 */
import type { Session } from "../store/store.ts";
import { bodyWith, readJsonBody } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";

/**
 * Gives `session` the body's `title` and answers `{session_id, title}`. A 400 `invalid_body` unless the body is
 * an object whose `title` is a string of at most 80 characters once trimmed; a blank title names the session
 * from its first question again (null without one); 404 when the session went meanwhile.
 */
export async function handleRename(request: Request, session: Session, deps: HandlerDeps): Promise<Response> {
  const body = await readJsonBody(request, { maxBytes: deps.maxBodyBytes });
  const { title } = bodyWith(body, "title", "Cannot rename the session");
  const key = { userId: session.userId, sessionId: session.id };
  let renamed: Session | null;
  try {
    renamed = await deps.store.renameSession(key, title as string);
  } catch (error) {
    if (error instanceof TypeError || error instanceof RangeError) {
      throw new HttpError(400, "invalid_body", error.message);
    }
    throw error;
  }
  if (renamed === null) throw new HttpError(404, "not_found", `Session "${session.id}" not found`);
  return Response.json({ session_id: renamed.id, title: renamed.title });
}
