// Conversions between the protocol's snake case and the SDK's camel case.

/** Copies v with its object keys in camel case (exit_code → exitCode). */
export function camelKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(camelKeys);
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    out[k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())] = camelKeys(x);
  }
  return out;
}

/** The bytes of a string or byte array. */
export function toBuffer(d: string | Uint8Array): Buffer {
  if (typeof d === 'string') return Buffer.from(d, 'utf8');
  if (Buffer.isBuffer(d)) return d;
  return Buffer.from(d.buffer, d.byteOffset, d.byteLength);
}

/** The bytes of field key of obj: cut out of the line, or decoded from base64. */
export function blobOf(blobs: Record<string, string> | undefined, obj: any, key: string): Buffer {
  const s = blobs?.[key] ?? obj?.[key];
  return s ? Buffer.from(s, 'base64') : Buffer.alloc(0);
}

/** The base64 text of field key of obj, cut out of the line or parsed. */
export function base64Of(blobs: Record<string, string> | undefined, obj: any, key: string): string {
  return blobs?.[key] ?? obj?.[key] ?? '';
}
