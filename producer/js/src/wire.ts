/**
 * Wire format v1 (cms_core/wire.py, docs/wire-format.md): a 16-byte header (magic "OC", version 1,
 * kind 1 single report | 2 frame, 8-byte fingerprint, 4-byte record count, all big-endian) and count
 * records of a0 (W bytes) | a1 (W bytes) | z (Z bytes); direct randomized response sends z alone.
 * The decoder checks what cms_core's does, in its order, with the same reason codes.
 */

import { ReportParams } from "./config.js";
import { WireFormatError } from "./errors.js";
import { hex } from "./hash.js";

export const HEADER_SIZE = 16;
export const KIND_REPORT = 1;
export const KIND_FRAME = 2;
export const MAX_FRAME_RECORDS = 1 << 20;

export interface Record3 {
  a0: bigint;
  a1: bigint;
  z: number;
}

function readUint(bytes: Uint8Array, offset: number, width: number): bigint {
  let v = 0n;
  for (let i = 0; i < width; i++) v = (v << 8n) | BigInt(bytes[offset + i]);
  return v;
}

function writeBig(out: Uint8Array, offset: number, width: number, value: bigint): void {
  for (let i = offset + width - 1; i >= offset; i--) {
    out[i] = Number(value & 255n);
    value >>= 8n;
  }
}

function writeHeader(out: Uint8Array, kind: number, fingerprint: Uint8Array, count: number): void {
  out[0] = 0x4f; out[1] = 0x43; out[2] = 1; out[3] = kind;
  out.set(fingerprint, 4);
  new DataView(out.buffer, out.byteOffset, out.byteLength).setUint32(12, count);
}

/** One message of explicit records (tests, tools): a single report (kind 1, one record) or a frame. */
export function encodeRecords(params: ReportParams, records: readonly Record3[], kind = KIND_FRAME): Uint8Array {
  const n = records.length;
  if (kind === KIND_REPORT && n !== 1) throw new WireFormatError(`a single-report message holds exactly 1 record, not ${n}`, "count_mismatch");
  if (n < 1 || n > MAX_FRAME_RECORDS) throw new WireFormatError(`a frame holds 1..${MAX_FRAME_RECORDS} records, not ${n}`, "count_mismatch");
  const size = params.recordBytes;
  const w = params.field.coefficientBytes;
  const out = new Uint8Array(HEADER_SIZE + n * size);
  writeHeader(out, kind, params.fingerprint, n);
  records.forEach((r, i) => {
    let at = HEADER_SIZE + i * size;
    if (r.z < 0 || r.z >= params.m || !Number.isInteger(r.z)) throw new WireFormatError(`record ${i}: z=${r.z} >= m=${params.m}`, "z_out_of_range");
    if (!params.isDirect) {
      if (r.a0 < 0n || r.a1 < 0n || r.a0 >= params.field.order || r.a1 >= params.field.order) {
        throw new WireFormatError(`record ${i}: a0 or a1 outside the field ${params.field.label}`, "coefficient_out_of_field");
      }
      writeBig(out, at, w, r.a0);
      writeBig(out, at + w, w, r.a1);
      at += 2 * w;
    }
    writeBig(out, at, params.zBytes, BigInt(r.z));
  });
  return out;
}

/**
 * A frame of single-report messages of one parameter set (their records, in order, behind one header).
 * Every message must be a single report with `params`' fingerprint.
 */
export function frameOf(params: ReportParams, messages: readonly Uint8Array[]): Uint8Array {
  const n = messages.length;
  if (n < 1 || n > MAX_FRAME_RECORDS) throw new WireFormatError(`a frame holds 1..${MAX_FRAME_RECORDS} records, not ${n}`, "count_mismatch");
  const size = params.recordBytes;
  const out = new Uint8Array(HEADER_SIZE + n * size);
  writeHeader(out, KIND_FRAME, params.fingerprint, n);
  messages.forEach((m, i) => {
    if (m.length !== HEADER_SIZE + size || m[3] !== KIND_REPORT) {
      throw new WireFormatError(`message ${i} is not a single report of ${params.label}`, "count_mismatch");
    }
    for (let j = 0; j < 8; j++) {
      if (m[4 + j] !== params.fingerprint[j]) throw new WireFormatError(`message ${i} is not a report of ${params.label}`, "mixed_parameter_sets");
    }
    out.set(m.subarray(HEADER_SIZE), HEADER_SIZE + i * size);
  });
  return out;
}

export interface Header {
  kind: number;
  fingerprint: string;
  count: number;
}

/** (kind, fingerprint, count) after checking magic, version and kind. */
export function peekHeader(data: Uint8Array): Header {
  if (data.length < HEADER_SIZE) {
    throw new WireFormatError(`message of ${data.length} bytes is shorter than the ${HEADER_SIZE}-byte header`, "truncated");
  }
  if (data[0] !== 0x4f || data[1] !== 0x43) throw new WireFormatError(`bad magic ${hex(data.subarray(0, 2))} (expected 4f43)`, "bad_magic");
  if (data[2] !== 1) throw new WireFormatError(`unsupported wire version ${data[2]} (this build reads 1)`, "bad_version");
  const kind = data[3];
  if (kind !== KIND_REPORT && kind !== KIND_FRAME) throw new WireFormatError(`unknown message kind ${kind}`, "bad_kind");
  const count = new DataView(data.buffer, data.byteOffset, data.byteLength).getUint32(12);
  return { kind, fingerprint: hex(data.subarray(4, 12)), count };
}

/** Parse and validate one message; `lookup` maps a fingerprint (hex) to its parameters. */
export function decodeMessage(data: Uint8Array, lookup: (fingerprint: string) => ReportParams | undefined):
    { params: ReportParams; kind: number; records: Record3[] } {
  const { kind, fingerprint, count } = peekHeader(data);
  const params = lookup(fingerprint);
  if (params === undefined) throw new WireFormatError(`unknown parameter fingerprint ${fingerprint}`, "unknown_fingerprint");
  if (kind === KIND_REPORT && count !== 1) {
    throw new WireFormatError(`a single-report message must hold 1 record, header says ${count}`, "count_mismatch");
  }
  if (count === 0 || count > MAX_FRAME_RECORDS) throw new WireFormatError(`record count ${count} outside 1..${MAX_FRAME_RECORDS}`, "count_mismatch");
  const size = params.recordBytes;
  const expected = HEADER_SIZE + count * size;
  if (data.length < expected) {
    throw new WireFormatError(`${data.length} bytes for ${count} records of ${size} bytes (need ${expected})`, "truncated");
  }
  if (data.length > expected) {
    if ((data.length - HEADER_SIZE) % size === 0) {
      throw new WireFormatError(`header says ${count} records but the body holds ${(data.length - HEADER_SIZE) / size}`, "count_mismatch");
    }
    throw new WireFormatError(`${data.length} bytes, expected ${expected} for ${count} records`, "oversized");
  }
  const w = params.field.coefficientBytes;
  const records: Record3[] = [];
  for (let i = 0; i < count; i++) {
    const at = HEADER_SIZE + i * size;
    const z = Number(readUint(data, at + size - params.zBytes, params.zBytes));
    const a0 = params.isDirect ? 0n : readUint(data, at, w);
    const a1 = params.isDirect ? 1n : readUint(data, at + w, w);
    records.push({ a0, a1, z });
  }
  if (params.field.kind === "prime" && !params.isDirect) {
    const bad = records.findIndex((r) => r.a0 >= params.field.order || r.a1 >= params.field.order);
    if (bad >= 0) throw new WireFormatError(`record ${bad}: a0 or a1 >= field order ${params.field.order}`, "coefficient_out_of_field");
  }
  const badZ = records.findIndex((r) => r.z >= params.m);
  if (badZ >= 0) throw new WireFormatError(`record ${badZ}: z=${records[badZ].z} >= m=${params.m}`, "z_out_of_range");
  return { params, kind, records };
}
