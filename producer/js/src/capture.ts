/** Capture files (producer/capture.py, `ocms simulate --out`): each message as a 4-byte big-endian length + its bytes. */

export function captureRecord(message: Uint8Array): Uint8Array {
  const out = new Uint8Array(4 + message.length);
  new DataView(out.buffer).setUint32(0, message.length);
  out.set(message, 4);
  return out;
}

/** The messages of a capture (a torn tail throws RangeError). */
export function readCapture(data: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  while (at < data.length) {
    if (at + 4 > data.length) throw new RangeError(`capture: torn length prefix at byte ${at}`);
    const size = view.getUint32(at);
    if (at + 4 + size > data.length) throw new RangeError(`capture: message at byte ${at} needs ${size} bytes`);
    out.push(data.subarray(at + 4, at + 4 + size));
    at += 4 + size;
  }
  return out;
}
