// Client: one `airlock rpc` subprocess and the JSON-RPC session over its
// stdin and stdout.

import './polyfill.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { Writable } from 'node:stream';

import { AirlockNotInstalledError, ClosedError, errorFromWire } from './errors.js';
import { Queue } from './queue.js';
import type { CreateParams, EventsOptions, ImageProgress, InfoResult, PoolInfo, SandboxEvent } from './types.js';
import { camelKeys } from './wire.js';
import { Sandbox } from './sandbox.js';

/** The protocol version this SDK speaks (api.Version). */
export const PROTOCOL_VERSION = 1;

export interface ClientOptions {
  /** The airlock executable; default $AIRLOCK_BIN, else `airlock` on PATH. */
  binary?: string;
  /** Extra arguments after `rpc` (for example ["--max-message-mb", "256"]). */
  args?: string[];
  /** The server's environment (default this process's). */
  env?: NodeJS.ProcessEnv;
  /**
   * Where the server's diagnostics go: "ignore" (default: only the last
   * lines are kept, for the error when it exits), "inherit", or a function.
   */
  stderr?: 'ignore' | 'inherit' | ((chunk: Buffer) => void);
  /** How long close waits for the server to exit before killing it (ms, default 10000). */
  closeTimeoutMs?: number;
}

/** A message from the server, with large base64 fields cut out as bytes. */
export interface Message {
  id?: number | string | null;
  method?: string;
  params?: any;
  result?: any;
  error?: { code: number; message: string; data?: unknown };
  /** Base64 fields (content, stdout, stderr) of a large line, cut out of it unparsed. */
  blobs?: Record<string, string>;
}

/** What waits for the responses of one id. */
export interface Pending {
  /** Takes a response; true when it is the last for this id. */
  deliver(msg: Message): boolean;
  fail(err: Error): void;
}

/** Where the installation instructions live. */
const INSTALL_HINT =
  'Install airlock (Linux): from a checkout of https://github.com/airlock-sandbox/airlock run ' +
  '`make build && sudo make install` (puts airlock and airlock-guest in /usr/local/bin), ' +
  'or set AIRLOCK_BIN to the path of an airlock binary (with airlock-guest beside it).';

/** Resolves the airlock executable: opts, $AIRLOCK_BIN, then PATH. */
export function findBinary(bin?: string): string {
  const env = process.env.AIRLOCK_BIN;
  const given = bin || env;
  if (given) {
    try {
      accessSync(given, fsConstants.X_OK);
      if (statSync(given).isFile()) return given;
    } catch {
      // fall through to the error
    }
    throw new AirlockNotInstalledError(
      `airlock: ${bin ? 'binary' : 'AIRLOCK_BIN'} ${given} is not an executable file. ${INSTALL_HINT}`,
    );
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, 'airlock');
    try {
      accessSync(p, fsConstants.X_OK);
      if (statSync(p).isFile()) return p;
    } catch {
      // not here
    }
  }
  throw new AirlockNotInstalledError(`airlock: no airlock executable on PATH and AIRLOCK_BIN is not set. ${INSTALL_HINT}`);
}

const NL = 0x0a;
/** Lines longer than this have their base64 fields cut out rather than parsed. */
const CUT_OVER = 16 << 10;
const CUT_KEYS = ['content', 'stdout', 'stderr'];

/** Cuts the base64 fields out of a large line and parses the rest. */
function parseLine(line: Buffer): Message {
  if (line.length <= CUT_OVER) return JSON.parse(line.toString('utf8'));
  let blobs: Record<string, string> | undefined;
  const keep: Buffer[] = [];
  let from = 0;
  const spans: [number, number, string][] = [];
  for (const k of CUT_KEYS) {
    const at = line.indexOf(`"${k}":"`);
    if (at < 0) continue;
    const s = at + k.length + 4;
    const e = line.indexOf(0x22, s);
    if (e < 0 || e - s < 1024) continue;
    spans.push([s, e, k]);
  }
  if (spans.length === 0) return JSON.parse(line.toString('utf8'));
  spans.sort((a, b) => a[0] - b[0]);
  blobs = {};
  for (const [s, e, k] of spans) {
    keep.push(line.subarray(from, s));
    blobs[k] = line.toString('latin1', s, e);
    from = e;
  }
  keep.push(line.subarray(from));
  const msg: Message = JSON.parse(Buffer.concat(keep).toString('utf8'));
  msg.blobs = blobs;
  return msg;
}

type Listener<T> = (v: T) => void;

/**
 * A session with `airlock rpc`: it creates sandboxes and carries their
 * requests. Close it (or let this process end) and its sandboxes are torn
 * down. Many requests may be in flight at once.
 */
export class Client {
  private proc: ChildProcess;
  private stdin: Writable;
  private nextId = 0;
  private pending = new Map<number, Pending>();
  private parts: Buffer[] = [];
  private partsLen = 0;
  private eventListeners = new Set<Listener<SandboxEvent>>();
  private progressListeners = new Set<Listener<ImageProgress>>();
  private holds = 0;
  private closing: Promise<void> | undefined;
  private exited: Promise<void>;
  private exitInfo: string | undefined;
  private stderrTail: Buffer[] = [];
  private closedErr: Error | undefined;
  private readonly closeTimeoutMs: number;
  /** The server's pid. */
  readonly pid: number;
  /** The server's largest message (info's max_message_bytes). */
  maxMessageBytes = 128 << 20;
  /**
   * Whether the server can write host files for large reads (read_file's
   * host_path, sparing base64 both ways): until it refuses one.
   */
  hostFiles = true;

  private constructor(bin: string, opts: ClientOptions) {
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 10000;
    this.proc = spawn(bin, ['rpc', ...(opts.args ?? [])], {
      env: opts.env ?? process.env,
      stdio: ['pipe', 'pipe', opts.stderr === 'inherit' ? 'inherit' : 'pipe'],
    });
    this.pid = this.proc.pid ?? -1;
    this.stdin = this.proc.stdin!;
    this.stdin.on('error', () => {
      // EPIPE when the server is gone: the exit handler reports it.
    });
    this.proc.stdout!.on('data', (chunk: Buffer) => this.onData(chunk));
    const stderrFn = typeof opts.stderr === 'function' ? opts.stderr : undefined;
    this.proc.stderr?.on('data', (chunk: Buffer) => {
      this.stderrTail.push(chunk);
      let n = this.stderrTail.reduce((a, b) => a + b.length, 0);
      while (n > 4096 && this.stderrTail.length > 1) n -= this.stderrTail.shift()!.length;
      stderrFn?.(chunk);
    });
    this.exited = new Promise((resolve) => {
      let spawnErr: Error | undefined;
      this.proc.on('error', (err) => {
        spawnErr = err;
        this.exitInfo = `could not run ${bin}: ${err.message}`;
        this.failAll();
        resolve();
      });
      this.proc.on('close', (code, signal) => {
        if (!spawnErr) this.exitInfo = signal ? `killed by ${signal}` : `exited with status ${code}`;
        this.failAll();
        resolve();
      });
    });
    this.setHeld();
  }

  /** Runs `airlock rpc` and checks that it speaks this SDK's protocol. */
  static async start(opts: ClientOptions = {}): Promise<Client> {
    const bin = findBinary(opts.binary);
    const c = new Client(bin, opts);
    try {
      const info = await c.info();
      if (info.protocol !== PROTOCOL_VERSION) {
        throw new Error(
          `airlock: the server speaks protocol ${info.protocol} and this SDK protocol ${PROTOCOL_VERSION}: use an SDK and an airlock binary of the same release`,
        );
      }
      c.maxMessageBytes = info.maxMessageBytes;
    } catch (err) {
      await c.close();
      throw err;
    }
    return c;
  }

  /** Creates a sandbox in this session; closing it leaves the session open. */
  async create(params: CreateParams = {}, opts: { onProgress?: (p: ImageProgress) => void } = {}): Promise<Sandbox> {
    const off = opts.onProgress ? this.onImageProgress(opts.onProgress) : undefined;
    try {
      const r = await this.call('create', params);
      return new Sandbox(this, r.result, false);
    } finally {
      off?.();
    }
  }

  /**
   * Starts a pool that keeps `size` sandboxes (1 to 64) of config started
   * and ready, and returns its id: `create({ pool: id })` then takes a
   * ready sandbox at once. The pool ends with the session, or with
   * poolClose.
   */
  async poolCreate(size: number, config: CreateParams = {}, opts: { onProgress?: (p: ImageProgress) => void } = {}): Promise<string> {
    const off = opts.onProgress ? this.onImageProgress(opts.onProgress) : undefined;
    try {
      return (await this.call('pool.create', { ...config, size })).result.pool_id;
    } finally {
      off?.();
    }
  }

  /** The session's pools, oldest first. */
  async poolList(): Promise<PoolInfo[]> {
    const r = (await this.call('pool.list', {})).result;
    return (r.pools ?? []).map((p: any) => ({
      poolId: p.pool_id,
      isolation: p.isolation,
      size: p.size,
      ready: p.ready,
      started: p.started,
      failed: p.failed,
      discarded: p.discarded,
    }));
  }

  /** Closes a pool: the sandboxes waiting in it are closed; those taken from it keep running. */
  async poolClose(poolId: string): Promise<void> {
    await this.call('pool.close', { pool_id: poolId });
  }

  /** The server's version and sandboxes. */
  async info(): Promise<InfoResult> {
    const r = (await this.call('info', {})).result;
    return {
      version: r.version,
      protocol: r.protocol,
      maxMessageBytes: r.max_message_bytes,
      eventsDropped: r.events_dropped ?? 0,
      sandboxes: (r.sandboxes ?? []).map((s: any) => ({
        sandboxId: s.sandbox_id,
        isolation: s.isolation,
        createdAt: new Date(s.created_at),
        pid: s.pid,
        notes: s.notes,
        state: s.state,
      })),
    };
  }

  /** Selects the event types the session delivers (none given: all). */
  async subscribe(...types: string[]): Promise<string[]> {
    return (await this.call('events.subscribe', { types })).result.types;
  }

  /** Stops event delivery. */
  async unsubscribe(): Promise<void> {
    await this.call('events.unsubscribe', {});
  }

  /** Calls handler with each event of the session; returns a function that stops it. */
  onEvent(handler: (e: SandboxEvent) => void): () => void {
    this.eventListeners.add(handler);
    return () => this.eventListeners.delete(handler);
  }

  /** Calls handler with each image.progress notification; returns a function that stops it. */
  onImageProgress(handler: (p: ImageProgress) => void): () => void {
    this.progressListeners.add(handler);
    return () => this.progressListeners.delete(handler);
  }

  /**
   * The session's events as an async iterator, from now until the client
   * closes or the loop ends. A reader too slow for opts.buffer events loses
   * the later ones, counted in the iterator's `dropped`.
   */
  events(opts: EventsOptions & { sandboxId?: string } = {}): Queue<SandboxEvent> {
    let off: () => void = () => {};
    const q = new Queue<SandboxEvent>(opts.buffer ?? 1024, () => {
      off();
      this.release();
    });
    const types = opts.types && opts.types.length ? new Set(opts.types) : undefined;
    off = this.onEvent((e) => {
      if (types && !types.has(e.type)) return;
      if (opts.sandboxId && e.sandboxId !== opts.sandboxId) return;
      q.push(e);
    });
    if (this.closedErr) q.end();
    else {
      this.hold();
      this.endOnClose.add(q);
    }
    return q;
  }
  private endOnClose = new Set<Queue<SandboxEvent>>();

  /**
   * Calls method with params and resolves with its response (result and
   * blobs); an error response rejects with the error class of its code.
   */
  call(method: string, params: unknown, opts: { signal?: AbortSignal } = {}): Promise<Message> {
    return new Promise((resolve, reject) => {
      const id = this.send(method, params, {
        deliver: (msg) => {
          if (msg.error) reject(errorFromWire(msg.error, method));
          else resolve(msg);
          return true;
        },
        fail: reject,
      }, opts.signal);
      void id;
    });
  }

  /**
   * Sends a request whose responses go to p; returns its id. A large
   * base64 field (blob) goes into the line without JSON encoding.
   */
  send(method: string, params: unknown, p: Pending, signal?: AbortSignal, blob?: { key: string; data: Uint8Array }): number {
    const id = ++this.nextId;
    if (this.closedErr) {
      p.fail(this.closedErr);
      return id;
    }
    if (signal?.aborted) {
      p.fail(abortReason(signal));
      return id;
    }
    let onAbort: (() => void) | undefined;
    if (signal) {
      onAbort = () => {
        if (this.pending.get(id) === wrapped) {
          this.forget(id);
          p.fail(abortReason(signal));
          if (method === 'exec' || method === 'exec_stream') {
            const sid = (params as { sandbox_id?: string }).sandbox_id;
            this.call('cancel', sid ? { sandbox_id: sid, id } : { id }).catch(() => {});
          }
        }
      };
      signal.addEventListener('abort', onAbort, { once: true });
    }
    const wrapped: Pending = {
      deliver: (msg) => {
        const last = p.deliver(msg);
        if (last) {
          this.forget(id);
          if (onAbort) signal!.removeEventListener('abort', onAbort);
        }
        return last;
      },
      fail: (err) => {
        if (onAbort) signal!.removeEventListener('abort', onAbort);
        p.fail(err);
      },
    };
    this.pending.set(id, wrapped);
    this.hold();
    const head = `{"jsonrpc":"2.0","id":${id},"method":${JSON.stringify(method)},"params":`;
    if (blob) {
      const rest = JSON.stringify(params);
      this.stdin.write(`${head}{"${blob.key}":"`);
      this.stdin.write(Buffer.from(blob.data.buffer, blob.data.byteOffset, blob.data.byteLength).toString('base64'));
      this.stdin.write(rest === '{}' ? '"}}\n' : `",${rest.slice(1)}}\n`);
    } else {
      this.stdin.write(`${head}${JSON.stringify(params ?? {})}}\n`);
    }
    return id;
  }

  /** Resolves once the server's stdin has taken what was written (flow control for large uploads). */
  drained(): Promise<void> {
    if (!this.stdin.writableNeedDrain || this.closedErr) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.stdin.off('drain', done);
        this.proc.off('close', done);
        resolve();
      };
      this.stdin.on('drain', done);
      this.proc.on('close', done);
    });
  }

  private forget(id: number): void {
    if (this.pending.delete(id)) this.release();
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(NL, start);
      if (nl < 0) {
        if (start < chunk.length) {
          this.parts.push(chunk.subarray(start));
          this.partsLen += chunk.length - start;
        }
        return;
      }
      let line: Buffer;
      if (this.parts.length) {
        this.parts.push(chunk.subarray(start, nl));
        line = Buffer.concat(this.parts, this.partsLen + nl - start);
        this.parts = [];
        this.partsLen = 0;
      } else {
        line = chunk.subarray(start, nl);
      }
      start = nl + 1;
      if (line.length === 0) continue;
      let msg: Message;
      try {
        msg = parseLine(line);
      } catch (err) {
        this.protocolError(`airlock: the server sent a line that is not JSON (${(err as Error).message})`);
        return;
      }
      this.route(msg);
    }
  }

  private route(msg: Message): void {
    if (msg.id !== undefined && msg.id !== null && msg.method === undefined) {
      const p = typeof msg.id === 'number' ? this.pending.get(msg.id) : undefined;
      p?.deliver(msg);
      return;
    }
    if (msg.method === 'event') {
      const e = toEvent(msg.params);
      for (const l of [...this.eventListeners]) {
        try {
          l(e);
        } catch (err) {
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    } else if (msg.method === 'image.progress') {
      for (const l of [...this.progressListeners]) l(msg.params as ImageProgress);
    }
  }

  private protocolError(message: string): void {
    this.closedErr = new ClosedError(message);
    this.proc.kill('SIGKILL');
  }

  private failAll(): void {
    if (!this.closedErr) {
      const tail = Buffer.concat(this.stderrTail).toString('utf8').trim();
      this.closedErr = new ClosedError(
        this.closing
          ? 'airlock client is closed'
          : `airlock rpc ended (${this.exitInfo ?? 'exited'})${tail ? `: ${tail.split('\n').slice(-5).join('\n')}` : ''}`,
      );
    }
    const ps = [...this.pending.values()];
    this.pending.clear();
    for (const p of ps) p.fail(this.closedErr);
    for (const q of this.endOnClose) q.end();
    this.endOnClose.clear();
    this.holds = 0;
    this.setHeld();
  }

  // The subprocess keeps this process alive only while something waits on
  // it (a call, a stream, an event iterator): a program that ends without
  // closing exits, and the server, its stdin gone, tears its sandboxes down.
  private hold(): void {
    if (this.holds++ === 0) this.setHeld();
  }

  /** @internal */
  release(): void {
    if (this.holds > 0 && --this.holds === 0) this.setHeld();
  }

  /** @internal Keeps this process alive while a stream waits. */
  retain(): void {
    this.hold();
  }

  private setHeld(): void {
    const on = this.holds > 0 && !this.closedErr;
    const handles = [this.proc, this.proc.stdin, this.proc.stdout, this.proc.stderr] as (
      | { ref?: () => void; unref?: () => void }
      | null
    )[];
    for (const h of handles) {
      if (!h) continue;
      if (on) h.ref?.();
      else h.unref?.();
    }
  }

  /** Whether the client is closed or its server gone. */
  get closed(): boolean {
    return this.closedErr !== undefined;
  }

  /**
   * Ends the session: closes the session's sandboxes when calls are still
   * in flight (the server answers what is in flight before it ends), then
   * the server's stdin, which tears all its sandboxes down, and waits for
   * it to exit (killing it after closeTimeoutMs). Calls still in flight
   * fail with ClosedError.
   */
  close(): Promise<void> {
    if (!this.closing) {
      this.closing = (async () => {
        this.holds++;
        this.setHeld();
        await this.closeSandboxes();
        this.stdin.end();
        const t = setTimeout(() => this.proc.kill('SIGKILL'), this.closeTimeoutMs);
        await this.exited;
        clearTimeout(t);
      })();
    }
    return this.closing;
  }

  /**
   * With calls in flight, closes every sandbox of the session: at the end
   * of its input the server answers what is in flight before it ends, and
   * a command that runs on would keep it from ending.
   */
  private async closeSandboxes(): Promise<void> {
    if (this.pending.size === 0 || this.closedErr !== undefined) return;
    const signal = AbortSignal.timeout(5000);
    try {
      const info = await this.call('info', {}, { signal });
      const sbs: { sandbox_id: string }[] = info.result?.sandboxes ?? [];
      await Promise.all(sbs.map((s) => this.call('close', { sandbox_id: s.sandbox_id }, { signal }).catch(() => {})));
    } catch {
      // The server is gone or stuck: close() kills it.
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

function abortReason(signal: AbortSignal): Error {
  const r = signal.reason;
  if (r instanceof Error) return r;
  const e = new Error(r === undefined ? 'This operation was aborted' : String(r));
  e.name = 'AbortError';
  return e;
}

function toEvent(p: any): SandboxEvent {
  const e = camelKeys(p) as SandboxEvent;
  return e;
}
