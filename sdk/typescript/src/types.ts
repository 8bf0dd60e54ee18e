// The SDK's types. create's params are the protocol's own JSON (snake
// case, as the README's JSON-RPC section and api/api.go spell them), since
// their maps are keyed by the caller's names (env variables, mount paths,
// secrets); everything the SDK returns is camel case.

/** A programmable mount of create's vfs. */
export interface VfsMount {
  type: 'memory' | 'real_fs' | 'overlay' | string;
  size_mb?: number;
  host_path?: string;
  readonly?: boolean;
  upper?: VfsMount;
  lower?: VfsMount;
}

/** create's params: the JSON of api.CreateParams. */
export interface CreateParams {
  /** "host" (default), a variant ("minimal", "standard", ...) or an OCI reference. */
  image?: string;
  rootfs?: string;
  isolation?: string;
  resources?: { cpus?: number; memory_mb?: number; timeout_seconds?: number };
  env?: Record<string, string>;
  pids_limit?: number;
  nofile_limit?: number;
  disk_mb?: number;
  max_file_size_mb?: number;
  max_output_bytes?: number;
  hostname?: string;
  allow_ptrace?: boolean;
  /** The egress policy (policy.Config's JSON); absent: no network; {}: a network allowing nothing yet. */
  network?: {
    allowed_hosts?: string[];
    denied_hosts?: string[];
    block_private_ips?: boolean;
    allowed_cidrs?: string[];
    egress?: { destination: string; ports?: number[]; protocol?: string }[];
    secrets?: Record<string, { value: string; hosts: string[]; allow_plaintext?: boolean }>;
    scrub_responses?: boolean;
    policy_script?: string;
    dns_servers?: string[];
    extra_root_cas?: string[];
    response_header_timeout_seconds?: number;
    [key: string]: unknown;
  };
  /** TCP ports to publish on the host once it has started (see Sandbox.portForward). */
  ports?: PortMapping[];
  /** Programmable mounts, direct mounts and blocked paths, by sandbox path. */
  vfs?: {
    mounts?: Record<string, VfsMount>;
    direct_mounts?: Record<string, { host_path: string; readonly?: boolean }>;
    blocked_paths?: string[];
  };
  /** A pool id (Client.poolCreate): the sandbox is taken from that pool, ready; give it alone. */
  pool?: string;
}

/** A pool of the session (Client.poolList). */
export interface PoolInfo {
  poolId: string;
  isolation: string;
  /** Sandboxes the pool keeps ready, and how many are ready now. */
  size: number;
  ready: number;
  /** Starts that succeeded and failed, and ready sandboxes that ended before they were taken. */
  started: number;
  failed: number;
  discarded: number;
}

/** The image a sandbox runs. */
export interface ImageInfo {
  name: string;
  key?: string;
  workingDir?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
}

/** image.progress while create gets its image into the cache. */
export interface ImageProgress {
  image: string;
  step: string;
  item?: string;
  done: number;
  total?: number;
  unit?: string;
}

/** Options of one command (exec, start). */
export interface ExecOptions {
  workingDir?: string;
  env?: Record<string, string>;
  /** USER, UID, USER:GROUP or UID:GID; default the image's user, else root. */
  user?: string;
  /** Kills the command's process tree after this long; the result says killedBy "timeout". */
  timeoutSeconds?: number;
  /** The command's whole input. */
  stdin?: string | Uint8Array;
  tty?: boolean;
  rows?: number;
  cols?: number;
  /** Cancels the command (the server kills it) and rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of a streaming command (start). */
export interface StartOptions extends Omit<ExecOptions, 'stdin'> {
  /**
   * The command's input: a string or bytes (the whole input), or an
   * iterable sent as it comes and then closed. Without it, and without
   * openStdin, the command's stdin is empty.
   */
  stdin?: string | Uint8Array | AsyncIterable<string | Uint8Array> | Iterable<string | Uint8Array>;
  /** Keep stdin open for Process.write until Process.closeStdin. */
  openStdin?: boolean;
}

/** One piece of a streaming command's output. */
export interface OutputChunk {
  stream: 'stdout' | 'stderr';
  data: Buffer;
}

/** A file's description; mode holds permission bits (and Go's file-type bits). */
export interface FileInfo {
  name: string;
  size: number;
  mode: number;
  isDir: boolean;
  modTime: Date;
  link?: string;
}

/** A TCP port of the sandbox to publish on the host, as docker's -p. */
export interface PortMapping {
  /** The port a server in the sandbox listens on (on 0.0.0.0, not 127.0.0.1 alone). */
  sandbox_port: number;
  /** The host port; absent or 0: a free one. */
  host_port?: number;
  /** The host address; absent: 127.0.0.1. */
  host_ip?: string;
  /** "tcp" (the default); "udp" is refused. */
  protocol?: string;
}

/** A published port: the host address bound and the sandbox port it leads to. */
export interface PortForward {
  hostIp: string;
  hostPort: number;
  sandboxPort: number;
  protocol: string;
}

/** The host lists of a sandbox's network policy, after a change. */
/** What a sandbox uses now (sandbox.usage()); limits of 0 are none. */
/** A process of a sandbox's commands (sb.processes()), as ps inside it would show it. */
export interface ProcessInfo {
  pid: number;
  ppid: number;
  uid: number;
  /** The kernel's letter: R running, S sleeping, D waiting on a device, Z zombie, T stopped. */
  state: string;
  cpuNanos: number;
  rssBytes: number;
  elapsedMs: number;
  /** Its argv (cut to 512 bytes), or its name in brackets. */
  command: string[];
}

export interface Usage {
  /** When it was read (RFC 3339). */
  time: string;
  /** CPU time used so far, in nanoseconds. */
  cpuNanos: number;
  /** CPU quota in cores; 0: unlimited. */
  cpus: number;
  memoryBytes: number;
  memoryPeakBytes: number;
  memoryLimitBytes: number;
  pids: number;
  pidsLimit: number;
  oomKills: number;
  pidsLimitHits: number;
  netRxBytes: number;
  netTxBytes: number;
}

export interface PolicyHosts {
  allowedHosts: string[];
  deniedHosts: string[];
}

export interface ExecEvent {
  command: string[];
  exitCode: number;
  durationMs: number;
  killedBy?: string;
}

export interface FileEvent {
  op: string;
  path: string;
  to?: string;
  size?: number;
  blocked?: boolean;
  reason?: string;
}

export interface NetworkEvent {
  kind: 'http' | 'dns' | 'tcp' | 'udp' | 'inbound' | string;
  method?: string;
  url?: string;
  host?: string;
  ip?: string;
  port?: number;
  proto?: string;
  qtype?: string;
  answers?: string[];
  statusCode?: number;
  requestBytes?: number;
  responseBytes?: number;
  durationMs?: number;
  blocked: boolean;
  reason?: string;
}

export interface LifecycleEvent {
  state: string;
  durationMs?: number;
  reason?: string;
}

/** An event: exactly one of exec, file, network, lifecycle is set, as type says. */
export interface SandboxEvent {
  type: 'exec' | 'file' | 'network' | 'lifecycle';
  timestamp: number;
  sandboxId?: string;
  exec?: ExecEvent;
  file?: FileEvent;
  network?: NetworkEvent;
  lifecycle?: LifecycleEvent;
  /** Events dropped just before this one because they were read too slowly. */
  dropped?: number;
}

export interface SandboxInfo {
  sandboxId: string;
  isolation: string;
  createdAt: Date;
  pid: number;
  notes?: string[];
  state: 'running' | 'stopped' | string;
}

export interface InfoResult {
  version: string;
  protocol: number;
  maxMessageBytes: number;
  sandboxes: SandboxInfo[];
  eventsDropped: number;
}

/** Options of an event iterator. */
export interface EventsOptions {
  /** Only these types (exec, file, network, lifecycle). */
  types?: string[];
  /** Events held for a slow reader before more are dropped (default 1024). */
  buffer?: number;
}
