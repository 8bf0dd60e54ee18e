// Sandbox: the operations on one sandbox, with the Go API's names.

import './polyfill.js';
import { mkdtemp, readFile as readHostFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Writable } from 'node:stream';

import type { Client, ClientOptions, Message } from './client.js';
import { errorFromWire, InvalidParamsError } from './errors.js';
import { Queue } from './queue.js';
import type {
  CreateParams,
  EventsOptions,
  ExecOptions,
  FileInfo,
  ImageInfo,
  ImageProgress,
  OutputChunk,
  PolicyHosts,
  PortForward,
  ProcessInfo,
  SandboxEvent,
  StartOptions,
  Usage,
} from './types.js';
import { base64Of, blobOf, toBuffer } from './wire.js';

/** How much of a file the streaming reads and writes carry in one request (8 MiB). */
export const STREAM_CHUNK = 8 << 20;

/** How many parts of one file readFile has in flight. */
const READ_AHEAD = 3;
/** What readFile asks for in its first request when host files serve the rest. */
const INLINE_READ = 1 << 20;

/** The result of a command: its output as bytes (and text), exit status and costs. */
export class ExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  durationMs: number;
  cpuTimeMs: number;
  peakMemoryBytes: number;
  /** "timeout", "oom", "signal", or null. */
  killedBy: string | null;
  signal: number;
  limitsHit: string[];

  /** @internal */
  constructor(r: any, stdout: Buffer, stderr: Buffer) {
    this.exitCode = r.exit_code ?? 0;
    this.stdout = stdout;
    this.stderr = stderr;
    this.stdoutTruncated = !!r.stdout_truncated;
    this.stderrTruncated = !!r.stderr_truncated;
    this.durationMs = r.duration_ms ?? 0;
    this.cpuTimeMs = r.cpu_time_ms ?? 0;
    this.peakMemoryBytes = r.peak_memory_bytes ?? 0;
    this.killedBy = r.killed_by ?? null;
    this.signal = r.signal ?? 0;
    this.limitsHit = r.limits_hit ?? [];
  }

  /** stdout decoded as UTF-8. */
  get stdoutText(): string {
    return this.stdout.toString('utf8');
  }

  /** stderr decoded as UTF-8. */
  get stderrText(): string {
    return this.stderr.toString('utf8');
  }

  /** Whether the command exited 0. */
  get ok(): boolean {
    return this.exitCode === 0 && this.killedBy === null;
  }
}

function execParams(sandboxId: string, command: string | string[], o: ExecOptions | StartOptions): Record<string, unknown> {
  const p: Record<string, unknown> = { sandbox_id: sandboxId };
  if (typeof command === 'string') p.command = command;
  else p.argv = command;
  if (o.workingDir !== undefined) p.working_dir = o.workingDir;
  if (o.env !== undefined) p.env = o.env;
  if (o.user !== undefined) p.user = o.user;
  if (o.timeoutSeconds !== undefined) p.timeout_seconds = o.timeoutSeconds;
  if (o.tty !== undefined) p.tty = o.tty;
  if (o.rows !== undefined) p.rows = o.rows;
  if (o.cols !== undefined) p.cols = o.cols;
  return p;
}

function fileInfo(f: any): FileInfo {
  const fi: FileInfo = {
    name: f.name,
    size: f.size,
    mode: f.mode,
    isDir: !!f.is_dir,
    modTime: new Date(f.mod_time),
  };
  if (f.link) fi.link = f.link;
  return fi;
}

function hosts(r: any): PolicyHosts {
  return { allowedHosts: r.allowed_hosts ?? [], deniedHosts: r.denied_hosts ?? [] };
}

/**
 * A running command with its output streamed: iterate it for chunks of
 * stdout and stderr; write to its stdin, signal, resize or cancel it; wait
 * for its result.
 */
export class Process implements AsyncIterable<OutputChunk> {
  /** The id of the exec_stream request, which names the command in stdin, signal, resize and cancel. */
  id = 0;
  private out: Queue<OutputChunk>;
  private result: Promise<ExecResult>;
  private settle!: { resolve: (r: ExecResult) => void; reject: (e: unknown) => void };
  private iterated = false;

  /** @internal */
  constructor(private readonly sb: Sandbox, command: string | string[], opts: StartOptions) {
    const client = sb.client;
    client.retain();
    this.out = new Queue<OutputChunk>();
    this.result = new Promise((resolve, reject) => (this.settle = { resolve, reject }));
    this.result.catch(() => {});
    const params = execParams(sb.id, command, opts);
    const input = opts.stdin;
    const whole = typeof input === 'string' || input instanceof Uint8Array;
    if (whole) params.stdin = toBuffer(input).toString('base64');
    else if (input !== undefined || opts.openStdin) params.open_stdin = true;
    let released = false;
    const release = () => {
      if (!released) {
        released = true;
        client.release();
      }
    };
    this.id = client.send('exec_stream', params, {
      deliver: (msg: Message) => {
        if (msg.error) {
          const err = errorFromWire(msg.error, 'exec_stream');
          this.out.end(err);
          this.settle.reject(err);
          release();
          return true;
        }
        const r = msg.result ?? {};
        if (r.done) {
          // What was not taken yet stays queued as well: iteration that
          // starts after the end (the end can come before an awaited
          // stdin answer) still sees every chunk.
          const rest = this.iterated ? [] : this.out.peek();
          const pick = (s: string) => Buffer.concat(rest.filter((c) => c.stream === s).map((c) => c.data));
          this.out.end();
          this.settle.resolve(new ExecResult(r, pick('stdout'), pick('stderr')));
          release();
          return true;
        }
        if (r.stdout !== undefined || msg.blobs?.stdout) this.out.push({ stream: 'stdout', data: blobOf(msg.blobs, r, 'stdout') });
        if (r.stderr !== undefined || msg.blobs?.stderr) this.out.push({ stream: 'stderr', data: blobOf(msg.blobs, r, 'stderr') });
        return false;
      },
      fail: (err: Error) => {
        this.out.end(err);
        this.settle.reject(err);
        release();
      },
    }, opts.signal);
    if (input !== undefined && !whole) void this.pump(input as AsyncIterable<string | Uint8Array>);
  }

  private async pump(src: AsyncIterable<string | Uint8Array> | Iterable<string | Uint8Array>): Promise<void> {
    try {
      for await (const d of src) await this.write(d);
      await this.closeStdin();
    } catch {
      // The command ended first; its result says how.
    }
  }

  /** The output as it comes, chunk by chunk. */
  [Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    this.iterated = true;
    return this.out;
  }

  /** Writes to the command's stdin (opened with openStdin). */
  async write(data: string | Uint8Array): Promise<void> {
    await this.sb.client.call('stdin', { sandbox_id: this.sb.id, id: this.id, data: toBuffer(data).toString('base64') });
  }

  /** Closes the command's stdin. */
  async closeStdin(): Promise<void> {
    await this.sb.client.call('stdin', { sandbox_id: this.sb.id, id: this.id, close: true });
  }

  /** Sends a signal, by name ("TERM", "SIGTERM") or number. */
  async signal(sig: string | number): Promise<void> {
    await this.sb.client.call('signal', { sandbox_id: this.sb.id, id: this.id, signal: sig });
  }

  /** Alias of signal (default SIGKILL). */
  kill(sig: string | number = 'KILL'): Promise<void> {
    return this.signal(sig);
  }

  /** Changes a TTY command's window size. */
  async resize(rows: number, cols: number): Promise<void> {
    await this.sb.client.call('resize', { sandbox_id: this.sb.id, id: this.id, rows, cols });
  }

  /** Kills the command's process tree; its result says killedBy "signal". */
  async cancel(): Promise<void> {
    await this.sb.client.call('cancel', { sandbox_id: this.sb.id, id: this.id });
  }

  /**
   * The command's result once it has ended. Output not taken through
   * iteration is in the result's stdout and stderr.
   */
  wait(): Promise<ExecResult> {
    return this.result;
  }
}

function portForward(r: any): PortForward {
  return { hostIp: r.host_ip, hostPort: r.host_port, sandboxPort: r.sandbox_port, protocol: r.protocol ?? 'tcp' };
}

/** The network policy of a sandbox: its lists of allowed and denied host patterns. */
export class Policy {
  /** @internal */
  constructor(private readonly sb: Sandbox) {}

  private async op(method: string, host?: string): Promise<PolicyHosts> {
    const p: Record<string, string> = { sandbox_id: this.sb.id };
    if (host !== undefined) p.host = host;
    return hosts((await this.sb.client.call(method, p)).result);
  }

  /** The lists in force. */
  get(): Promise<PolicyHosts> {
    return this.op('policy.get');
  }
  /** Allows a host pattern: "api.example.com", "*.example.com", "*", with ":PORT" for other ports. */
  allow(host: string): Promise<PolicyHosts> {
    return this.op('policy.allow', host);
  }
  /** Denies a host pattern; a denied pattern wins over every allowed one. */
  deny(host: string): Promise<PolicyHosts> {
    return this.op('policy.deny', host);
  }
  /** Removes a pattern from either list (NotFoundError when in neither). */
  remove(host: string): Promise<PolicyHosts> {
    return this.op('policy.remove', host);
  }
}

/**
 * A sandbox. Make one with Sandbox.create, which runs an `airlock rpc` of
 * its own that ends with it, or with Client.create to share one session.
 */
export class Sandbox {
  /** The sandbox id ("sb-..."). */
  readonly id: string;
  /** The isolation level it runs at ("process", ...). */
  readonly isolation: string;
  /** The environment commands get, with placeholders in place of secret values. */
  readonly env: Record<string, string>;
  /** Protections this machine could not apply. */
  readonly notes: string[];
  /** The image it runs. */
  readonly image: ImageInfo;
  /** Its network policy (UnsupportedError on a sandbox created without network). */
  readonly policy: Policy;
  /** The ports create published (its params' ports), with the host addresses bound. */
  readonly ports: PortForward[];
  private closing: Promise<void> | undefined;

  /** @internal */
  constructor(readonly client: Client, r: any, private readonly ownsClient: boolean) {
    this.id = r.sandbox_id;
    this.isolation = r.isolation;
    this.env = r.env ?? {};
    this.notes = r.notes ?? [];
    const im = r.image ?? {};
    this.image = {
      name: im.name,
      key: im.key,
      workingDir: im.working_dir,
      user: im.user,
      entrypoint: im.entrypoint,
      cmd: im.cmd,
    };
    this.policy = new Policy(this);
    this.ports = (r.ports ?? []).map(portForward);
  }

  /**
   * Creates a sandbox in an `airlock rpc` of its own, which ends when the
   * sandbox is closed (or when this process ends). Pass opts.client to
   * create it in an existing session instead.
   */
  static async create(
    params: CreateParams = {},
    opts: ClientOptions & { client?: Client; onProgress?: (p: ImageProgress) => void } = {},
  ): Promise<Sandbox> {
    if (opts.client) return opts.client.create(params, opts);
    const { Client } = await import('./client.js');
    const c = await Client.start(opts);
    try {
      const off = opts.onProgress ? c.onImageProgress(opts.onProgress) : undefined;
      const r = await c.call('create', params).finally(() => off?.());
      return new Sandbox(c, r.result, true);
    } catch (err) {
      await c.close();
      throw err;
    }
  }

  private async call(method: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<Message> {
    params.sandbox_id = this.id;
    return this.client.call(method, params, { signal });
  }

  // Commands.

  /**
   * Runs a command to its end and returns its output and status: a string
   * runs through /bin/sh -c, an array as argv. A non-zero exit is not an
   * error; a command that cannot start is (CommandFailedError).
   */
  async exec(command: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const p = execParams(this.id, command, opts);
    if (opts.stdin !== undefined) p.stdin = toBuffer(opts.stdin).toString('base64');
    const msg = await this.client.call('exec', p, { signal: opts.signal });
    const r = msg.result;
    return new ExecResult(r, blobOf(msg.blobs, r, 'stdout'), blobOf(msg.blobs, r, 'stderr'));
  }

  /** Alias of exec with an argv. */
  run(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    return this.exec(argv, opts);
  }

  /**
   * Starts a command that runs on by itself, as `docker exec -d` does, and
   * returns its pid in the sandbox: its output is discarded, and it ends
   * when it exits, its timeout passes or the sandbox stops (the exec event
   * reports its end). A terminal is refused; stdin, given whole, is its input.
   */
  async startDetached(command: string | string[], opts: ExecOptions = {}): Promise<number> {
    const p = execParams(this.id, command, opts);
    if (opts.stdin !== undefined) p.stdin = toBuffer(opts.stdin).toString('base64');
    p.detach = true;
    const msg = await this.client.call('exec', p, { signal: opts.signal });
    return msg.result.pid;
  }

  /** Starts a command whose output streams (exec_stream); see Process. */
  start(command: string | string[], opts: StartOptions = {}): Process {
    return new Process(this, command, opts);
  }

  // Files.

  /** Writes a whole file (mode default 0o644); returns its size. */
  async writeFile(path: string, data: string | Uint8Array, opts: { mode?: number } = {}): Promise<number> {
    return this.writeFileAt(path, undefined, data, opts);
  }

  /**
   * Writes data into the file at path from offset, in place: the rest of
   * the file stays, and with truncate it is cut where data ends. A missing
   * file is made with mode; a final symlink is refused.
   */
  async writeFileAt(
    path: string,
    offset: number | undefined,
    data: string | Uint8Array,
    opts: { mode?: number; truncate?: boolean } = {},
  ): Promise<number> {
    const p: Record<string, unknown> = { sandbox_id: this.id, path };
    if (opts.mode !== undefined) p.mode = opts.mode;
    if (offset !== undefined) p.offset = offset;
    if (opts.truncate) p.truncate = true;
    const bytes = toBuffer(data);
    const r = await new Promise<Message>((resolve, reject) => {
      this.client.send('write_file', p, {
        deliver: (m) => {
          if (m.error) reject(errorFromWire(m.error, 'write_file'));
          else resolve(m);
          return true;
        },
        fail: reject,
      }, undefined, { key: 'content', data: bytes });
    });
    await this.client.drained();
    return r.result?.size ?? bytes.length;
  }

  /**
   * Writes what source yields to path, replacing the file, in requests of
   * STREAM_CHUNK bytes, so that a file of any size goes with memory flat.
   * Returns the bytes written.
   */
  async writeFileFrom(
    path: string,
    source: AsyncIterable<string | Uint8Array> | Iterable<string | Uint8Array>,
    opts: { mode?: number } = {},
  ): Promise<number> {
    let buf = Buffer.allocUnsafe(STREAM_CHUNK);
    let n = 0;
    let off = 0;
    let first = true;
    const flush = async () => {
      if (first) await this.writeFile(path, buf.subarray(0, n), opts);
      else await this.writeFileAt(path, off, buf.subarray(0, n), opts);
      first = false;
      off += n;
      n = 0;
    };
    for await (const piece of source) {
      let d = toBuffer(piece);
      while (d.length > 0) {
        const k = Math.min(d.length, STREAM_CHUNK - n);
        d.copy(buf, n, 0, k);
        n += k;
        d = d.subarray(k);
        if (n === STREAM_CHUNK) {
          await flush();
          buf = Buffer.allocUnsafe(STREAM_CHUNK);
        }
      }
    }
    if (n > 0 || first) await flush();
    return off;
  }

  /**
   * Reads a whole file (at most opts.maxBytes, default what one message
   * holds: 64 MiB). A file larger than one chunk is read in STREAM_CHUNK
   * parts, several in flight, straight into the result.
   */
  async readFile(path: string, opts: { maxBytes?: number; signal?: AbortSignal } = {}): Promise<Buffer> {
    const whole = async () => {
      const p: Record<string, unknown> = { path };
      if (opts.maxBytes !== undefined) p.max_bytes = opts.maxBytes;
      const m = await this.call('read_file', p, opts.signal);
      return blobOf(m.blobs, m.result, 'content');
    };
    // The first MiB comes in the answer; the rest, when the server can
    // write host files, through one (readViaHost).
    const firstLength = this.client.hostFiles ? INLINE_READ : STREAM_CHUNK;
    const first = await this.call('read_file', { path, offset: 0, length: firstLength }, opts.signal);
    const size: number = first.result.file_size ?? 0;
    const head = base64Of(first.blobs, first.result, 'content');
    const got: number = first.result.size ?? 0;
    if (got === size || got < firstLength) {
      if (opts.maxBytes !== undefined && got > opts.maxBytes) return whole();
      return Buffer.from(head, 'base64');
    }
    // Larger than one message may hold (or than asked): the server's own
    // answer says so, as for a single read.
    if (size > (opts.maxBytes ?? this.client.maxMessageBytes / 2)) return whole();
    const out = Buffer.allocUnsafe(size);
    let end = out.write(head, 0, 'base64');
    const rest = await this.readViaHost(path, end, size - end, opts.signal);
    if (rest !== undefined) {
      rest.copy(out, end);
      return out.subarray(0, end + rest.length);
    }
    const parts: Promise<void>[] = [];
    let failed: unknown;
    let next = got;
    let short = size;
    const readPart = async (off: number): Promise<void> => {
      const m = await this.call('read_file', { path, offset: off, length: Math.min(STREAM_CHUNK, size - off) }, opts.signal);
      const n = out.write(base64Of(m.blobs, m.result, 'content'), off, 'base64');
      if (n < Math.min(STREAM_CHUNK, size - off)) short = Math.min(short, off + n);
      end = Math.max(end, off + n);
    };
    const worker = async () => {
      while (next < size && failed === undefined) {
        const off = next;
        next += STREAM_CHUNK;
        try {
          await readPart(off);
        } catch (err) {
          failed ??= err;
        }
      }
    };
    for (let i = 0; i < READ_AHEAD; i++) parts.push(worker());
    await Promise.all(parts);
    if (failed !== undefined) throw failed;
    // A file that shrank meanwhile ends where its first short part did.
    return out.subarray(0, Math.min(short, end));
  }

  /**
   * Reads length bytes from offset through a private temporary host file
   * that the server writes (read_file's host_path): no base64 either way.
   * Undefined when the server cannot write one (it runs on another host).
   */
  private async readViaHost(path: string, offset: number, length: number, signal?: AbortSignal): Promise<Buffer | undefined> {
    if (!this.client.hostFiles) return undefined;
    const dir = await mkdtemp(join(tmpdir(), 'airlock-read-'));
    const file = join(dir, 'part');
    try {
      await writeFile(file, '', { mode: 0o600 });
      try {
        await this.call('read_file', { path, offset, length, host_path: file }, signal);
      } catch (err) {
        if (err instanceof InvalidParamsError) {
          this.client.hostFiles = false;
          return undefined;
        }
        throw err;
      }
      return await readHostFile(file);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** Reads length bytes from offset (fewer where the file ends; 0: to the end), and the file's size. */
  async readFileAt(path: string, offset: number, length: number): Promise<{ data: Buffer; fileSize: number }> {
    const m = await this.call('read_file', { path, offset, length });
    return { data: blobOf(m.blobs, m.result, 'content'), fileSize: m.result.file_size ?? 0 };
  }

  /**
   * Reads a file of any size as chunks of at most chunkSize bytes, one
   * request ahead of the reader, with memory flat.
   */
  async *readFileStream(path: string, opts: { chunkSize?: number } = {}): AsyncGenerator<Buffer> {
    const size = opts.chunkSize ?? STREAM_CHUNK;
    let off = 0;
    let next = this.readFileAt(path, off, size);
    try {
      for (;;) {
        const { data } = await next;
        off += data.length;
        const more = data.length === size;
        if (more) next = this.readFileAt(path, off, size);
        if (data.length > 0) yield data;
        if (!more) return;
      }
    } finally {
      next.catch(() => {});
    }
  }

  /** Writes the file at path to w, streamed; returns the bytes written. */
  async readFileTo(path: string, w: Writable, opts: { chunkSize?: number } = {}): Promise<number> {
    let n = 0;
    for await (const d of this.readFileStream(path, opts)) {
      n += d.length;
      if (!w.write(d)) {
        await new Promise<void>((resolve, reject) => {
          const done = (err?: unknown) => {
            w.off('drain', done);
            w.off('error', done);
            if (err) reject(err);
            else resolve();
          };
          w.on('drain', done);
          w.on('error', done);
        });
      }
    }
    return n;
  }

  /** Lists a directory. */
  async listFiles(path: string): Promise<FileInfo[]> {
    const m = await this.call('list_files', { path });
    return (m.result.files ?? []).map(fileInfo);
  }

  /**
   * Stop every process of the sandbox where it is, until resume(). Meanwhile
   * exec and the file methods reject with SandboxPausedError; policy, ports,
   * usage and close are served.
   */
  async pause(): Promise<void> {
    await this.call('pause', {});
  }

  /** Let the processes of a paused sandbox run on. */
  async resume(): Promise<void> {
    await this.call('resume', {});
  }

  /** The processes of the sandbox's commands by pid, as ps inside it would show them (docker top); at most 512. */
  async processes(): Promise<ProcessInfo[]> {
    const r = (await this.call('processes', {})).result ?? {};
    const list: Record<string, unknown>[] = Array.isArray(r.processes) ? r.processes : [];
    return list.map((p) => ({
      pid: Number(p.pid ?? 0), ppid: Number(p.ppid ?? 0), uid: Number(p.uid ?? 0), state: String(p.state ?? ''),
      cpuNanos: Number(p.cpu_nanos ?? 0), rssBytes: Number(p.rss_bytes ?? 0), elapsedMs: Number(p.elapsed_ms ?? 0),
      command: Array.isArray(p.command) ? p.command.map(String) : [],
    }));
  }

  /** What the sandbox uses now: CPU time so far, memory, processes, network bytes. */
  async usage(): Promise<Usage> {
    const r = (await this.call('stats', {})).result ?? {};
    const n = (k: string) => Number(r[k] ?? 0);
    return {
      time: String(r.time ?? ''), cpuNanos: n('cpu_nanos'), cpus: n('cpus'),
      memoryBytes: n('memory_bytes'), memoryPeakBytes: n('memory_peak_bytes'), memoryLimitBytes: n('memory_limit_bytes'),
      pids: n('pids'), pidsLimit: n('pids_limit'), oomKills: n('oom_kills'), pidsLimitHits: n('pids_limit_hits'),
      netRxBytes: n('net_rx_bytes'), netTxBytes: n('net_tx_bytes'),
    };
  }

  /** Describes a file (a final link is not followed: link says where it leads). */
  async stat(path: string): Promise<FileInfo> {
    return fileInfo((await this.call('stat', { path })).result);
  }

  /** Makes a directory (mode default 0o755), with its parents when asked. */
  async mkdir(path: string, opts: { mode?: number; parents?: boolean } = {}): Promise<void> {
    const p: Record<string, unknown> = { path };
    if (opts.mode !== undefined) p.mode = opts.mode;
    if (opts.parents) p.parents = true;
    await this.call('mkdir', p);
  }

  /** Removes a file or empty directory, or with recursive a tree. */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.call('remove', opts.recursive ? { path, recursive: true } : { path });
  }

  /** Makes path a symbolic link to target (stored as given), replacing what is there. */
  async symlink(target: string, path: string): Promise<void> {
    await this.call('symlink', { path, target });
  }

  /** Sets path's permission bits and modification time, each when given, without following a final link. */
  async setAttr(path: string, attr: { mode?: number; modTime?: Date }): Promise<void> {
    const p: Record<string, unknown> = { path };
    if (attr.mode !== undefined) p.mode = attr.mode;
    if (attr.modTime !== undefined) p.mod_time = attr.modTime.toISOString();
    await this.call('set_attr', p);
  }

  // Network policy, with the Go API's names.

  /** The allowed and denied host patterns. */
  hosts(): Promise<PolicyHosts> {
    return this.policy.get();
  }
  allowHost(pattern: string): Promise<PolicyHosts> {
    return this.policy.allow(pattern);
  }
  denyHost(pattern: string): Promise<PolicyHosts> {
    return this.policy.deny(pattern);
  }
  removeHost(pattern: string): Promise<PolicyHosts> {
    return this.policy.remove(pattern);
  }

  // Published ports.

  /**
   * Publishes a TCP port of the sandbox on the host (127.0.0.1 unless
   * hostIp says otherwise; hostPort absent or 0: a free one) and returns
   * the address bound. No egress opens; UnsupportedError on a sandbox
   * without network.
   */
  async portForward(sandboxPort: number, opts: { hostPort?: number; hostIp?: string; protocol?: string } = {}): Promise<PortForward> {
    const p: Record<string, unknown> = { sandbox_port: sandboxPort };
    if (opts.hostPort !== undefined) p.host_port = opts.hostPort;
    if (opts.hostIp !== undefined) p.host_ip = opts.hostIp;
    if (opts.protocol !== undefined) p.protocol = opts.protocol;
    return portForward((await this.call('port_forward', p)).result);
  }

  /** Stops the ports published at hostPort (on hostIp, or any); NotFoundError when none is. */
  async portForwardClose(hostPort: number, hostIp?: string): Promise<PortForward[]> {
    const p: Record<string, unknown> = { host_port: hostPort };
    if (hostIp !== undefined) p.host_ip = hostIp;
    const r = (await this.call('port_forward_close', p)).result as any;
    return (r.closed ?? []).map(portForward);
  }

  // Events.

  /** Calls handler with each event of this sandbox; returns a function that stops it. */
  onEvent(handler: (e: SandboxEvent) => void): () => void {
    return this.client.onEvent((e) => {
      if (e.sandboxId === undefined || e.sandboxId === this.id) handler(e);
    });
  }

  /** This sandbox's events as an async iterator, until it is closed or the loop ends. */
  events(opts: EventsOptions = {}): AsyncIterableIterator<SandboxEvent> & { dropped: number } {
    return this.client.events({ ...opts, sandboxId: this.id });
  }

  // Lifetime.

  /**
   * Closes the sandbox, tearing it down; a sandbox made by Sandbox.create
   * also ends its `airlock rpc`. Closing again does nothing.
   */
  close(): Promise<void> {
    if (!this.closing) {
      this.closing = (async () => {
        try {
          if (!this.client.closed) await this.client.call('close', { sandbox_id: this.id });
        } finally {
          if (this.ownsClient) await this.client.close();
        }
      })();
    }
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
