/** SSE bodies read frame by frame, with each frame's `id:`, for the tests of resumable streams. */

/** One SSE frame as sent: its id (if any), event name and data. */
export interface Frame {
  id: string | undefined;
  event: string;
  data: Record<string, unknown>;
}

export function parseFrames(text: string): Frame[] {
  return text.split("\n\n").filter((block) => block.trim() !== "").map((block) => {
    const lines = block.split("\n");
    const field = (name: string) => lines.find((l) => l.startsWith(`${name}: `))?.slice(name.length + 2);
    return { id: field("id"), event: field("event") ?? "message", data: JSON.parse(field("data")!) };
  });
}

/** Reads an SSE body frame by frame. */
export class FrameReader {
  #reader: ReadableStreamDefaultReader<string>;
  #buffer = "";
  readonly frames: Frame[] = [];

  constructor(response: Response) {
    this.#reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  }

  /** Reads until a frame matches `done` (true once the stream ends without one). */
  async until(done: (frame: Frame) => boolean): Promise<boolean> {
    for (;;) {
      const end = this.#buffer.lastIndexOf("\n\n");
      if (end !== -1) {
        const frames = parseFrames(this.#buffer.slice(0, end + 2));
        this.#buffer = this.#buffer.slice(end + 2);
        for (const frame of frames) {
          this.frames.push(frame);
          if (done(frame)) return true;
        }
        continue;
      }
      const { value, done: ended } = await this.#reader.read();
      if (ended) return false;
      this.#buffer += value;
    }
  }

  /** Everything to the end of the stream. */
  async rest(): Promise<Frame[]> {
    await this.until(() => false);
    return this.frames;
  }

  cancel(): Promise<void> {
    return this.#reader.cancel();
  }
}
