/**
 * The one way to wait while an abort signal may fire: a wait either settles on its own or rejects with the
 * signal's reason as soon as it aborts, and leaves no timer or listener behind.
 * @module
 */

/**
 * The error to throw for an aborted `signal`: its reason, or an `AbortError` naming `what` was aborted when
 * it has none.
 */
export function abortError(signal: AbortSignal, what = "the operation"): unknown {
  return signal.reason ?? new DOMException(`${what} was aborted`, "AbortError");
}

/**
 * Settles as `promise` does, or rejects with the reason of the first of `signals` to abort. The promise is
 * left to settle on its own (cancel what it waits on, such as a stream reader, to free it), its rejection
 * handled.
 */
export function abortable<T>(promise: Promise<T>, signals: readonly (AbortSignal | undefined)[]): Promise<T> {
  const watched = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  const aborted = watched.find((signal) => signal.aborted);
  if (aborted !== undefined) {
    // Nobody awaits `promise` now: its own rejection (a read failing as the abort tears its stream down) must
    // not go unhandled, which ends the process.
    promise.catch(() => {});
    return Promise.reject(abortError(aborted));
  }
  if (watched.length === 0) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (event: Event) => reject(abortError(event.target as AbortSignal));
    for (const signal of watched) signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => {
      for (const signal of watched) signal.removeEventListener("abort", onAbort);
    });
  });
}

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts; always clears its timer. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal!));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
