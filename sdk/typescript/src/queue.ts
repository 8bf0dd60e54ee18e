// An async queue: what one side pushes, the other takes with for await.

export class Queue<T> implements AsyncIterableIterator<T> {
  private items: T[] = [];
  private head = 0;
  private waiters: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void }[] = [];
  private ended = false;
  private error: unknown = undefined;
  /** Items dropped because the queue was full (limit). */
  dropped = 0;

  constructor(private readonly limit = Infinity, private readonly onReturn?: () => void) {}

  get size(): number {
    return this.items.length - this.head;
  }

  get closed(): boolean {
    return this.ended;
  }

  push(v: T): boolean {
    if (this.ended) return false;
    const w = this.waiters.shift();
    if (w) {
      w.resolve({ value: v, done: false });
      return true;
    }
    if (this.size >= this.limit) {
      this.dropped++;
      return false;
    }
    this.items.push(v);
    return true;
  }

  /** Ends the queue: takers get what is queued, then the end (or err). */
  end(err?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.error = err;
    for (const w of this.waiters.splice(0)) {
      if (err !== undefined) w.reject(err);
      else w.resolve({ value: undefined, done: true });
    }
  }

  /** What is queued, left in place for takers. */
  peek(): T[] {
    return this.items.slice(this.head);
  }

  next(): Promise<IteratorResult<T>> {
    if (this.size > 0) {
      const v = this.items[this.head];
      this.items[this.head] = undefined as T;
      this.head++;
      if (this.head > 1024 && this.head * 2 > this.items.length) {
        this.items = this.items.slice(this.head);
        this.head = 0;
      }
      return Promise.resolve({ value: v, done: false });
    }
    if (this.ended) {
      if (this.error !== undefined) {
        const e = this.error;
        this.error = undefined;
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  return(): Promise<IteratorResult<T>> {
    this.end();
    this.items = [];
    this.head = 0;
    this.onReturn?.();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
