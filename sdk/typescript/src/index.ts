// @airlock/sdk: TypeScript SDK for airlock sandboxes, over `airlock rpc`.

import './polyfill.js';

export { Client, PROTOCOL_VERSION, findBinary } from './client.js';
export type { ClientOptions } from './client.js';
export { Sandbox, Process, Policy, ExecResult, STREAM_CHUNK } from './sandbox.js';
export * from './errors.js';
export type * from './types.js';
