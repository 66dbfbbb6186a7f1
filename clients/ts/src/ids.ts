// Request identities: a UUIDv7 request ID and a holder key per range
// request, chosen before its first attempt. Web Crypto's getRandomValues
// only, so that the same code runs in Node and in browsers.

function randomBytes(n: number): Uint8Array {
  const b = new Uint8Array(n);
  globalThis.crypto.getRandomValues(b);
  return b;
}

/**
 * uuidv7 returns a new UUIDv7 (RFC 9562) in its 36-character form: 48 bits
 * of Unix milliseconds, then random bits, so that the segment log's keys
 * grow with time.
 */
export function uuidv7(now: number = Date.now()): string {
  const b = randomBytes(16);
  let ms = Math.floor(now);
  for (let i = 5; i >= 0; i--) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = (b[6]! & 0x0f) | 0x70; // version 7
  b[8] = (b[8]! & 0x3f) | 0x80; // variant 10
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * holderKey returns a fresh holder key: 32 random bytes in unpadded
 * base64url (43 characters of A-Za-z0-9_-), the proof that a range is this
 * client's on a retry and at the give-back. It is sent in the request body
 * only, and never logged.
 */
export function holderKey(): string {
  const b = randomBytes(32);
  let s = "";
  for (const x of b) {
    s += String.fromCharCode(x);
  }
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
