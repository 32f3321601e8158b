// C2SP signed notes and checkpoints in the browser (WebCrypto Ed25519 only): the log's
// checkpoint (`/log/checkpoint`) is accepted when the log signed it with a key of the trusted
// chain and the page's pinned witness policy (witness-policy.js) finds enough cosignatures
// (C2SP tlog-cosignature/v1). Nothing here trusts the server's list of witnesses.
import { bytesToHex } from "./verify.js";

const enc = new TextEncoder();
const SIG_PREFIX = "\u2014 ";
const ALG_ED25519 = 0x01;
const ALG_COSIGNATURE_V1 = 0x04;
const MAX_NOTE_CHARS = 1_000_000;
const MAX_SIGNATURES = 100;

function b64(text) {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4) throw new Error("not base64");
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}
const concat = (...parts) => { const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0)); let o = 0; for (const p of parts) { out.set(p, o); o += p.length; } return out; };
const sha256 = async (b) => new Uint8Array(await crypto.subtle.digest("SHA-256", b));
const eq = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

async function keyHash(name, alg, raw) {
  return (await sha256(concat(enc.encode(name + "\n"), new Uint8Array([alg]), raw))).slice(0, 4);
}

// `<name>+<hex key hash>+<base64(alg || key)>` (signed-note verifier key).
export async function parseVerifierKey(vkey) {
  const parts = String(vkey).trim().split("+");
  if (parts.length < 3) throw new Error("verifier key is not <name>+<hash>+<key>");
  const [name, hashHex] = parts;
  const blob = b64(parts.slice(2).join("+"));
  if (blob.length !== 33 || ![ALG_ED25519, ALG_COSIGNATURE_V1].includes(blob[0])) throw new Error("not an Ed25519 or cosignature/v1 key");
  const v = { name, alg: blob[0], raw: blob.slice(1) };
  v.hash = await keyHash(name, v.alg, v.raw);
  if (bytesToHex(v.hash) !== hashHex) throw new Error("verifier key hash does not match its name and key");
  return v;
}

// The log's note key for `origin` from a raw Ed25519 public key of the trusted chain.
export async function logVerifier(origin, raw) {
  return { name: origin, alg: ALG_ED25519, raw, hash: await keyHash(origin, ALG_ED25519, raw) };
}

export function splitNote(text) {
  if (typeof text !== "string" || text.length > MAX_NOTE_CHARS) throw new Error("not a note");
  const cut = text.lastIndexOf("\n\n");
  if (cut < 0 || !text.endsWith("\n")) throw new Error("note has no signature block");
  const body = text.slice(0, cut + 1);
  const lines = text.slice(cut + 2, -1).split("\n");
  if (lines.length > MAX_SIGNATURES) throw new Error("too many signatures");
  const sigs = lines.map((line) => {
    if (!line.startsWith(SIG_PREFIX)) throw new Error("signature line must start with an em dash");
    const [name, sig] = line.slice(SIG_PREFIX.length).split(" ");
    const blob = b64(sig || "");
    if (!name || blob.length < 5) throw new Error("bad signature line");
    return { name, hash: blob.slice(0, 4), sig: blob.slice(4), line: line + "\n" };
  });
  return { body, sigs };
}

async function ed25519(raw, sig, msg) {
  if (sig.length !== 64) return false;
  const key = await crypto.subtle.importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
  return crypto.subtle.verify({ name: "Ed25519" }, key, sig, msg);
}

// The verifiers (of `verifiers`) whose signatures on the note verify; unknown keys are
// ignored, a bad signature by a known key fails the whole note (signed-note).
export async function verifyNote(text, verifiers) {
  const { body, sigs } = splitNote(text);
  const signed = [];
  for (const s of sigs) {
    const v = verifiers.find((k) => k.name === s.name && eq(k.hash, s.hash));
    if (!v) continue;
    let ok;
    if (v.alg === ALG_ED25519) ok = await ed25519(v.raw, s.sig, enc.encode(body));
    else {
      if (s.sig.length !== 72) ok = false;
      else {
        const time = new DataView(s.sig.buffer, s.sig.byteOffset, 8).getBigUint64(0);
        ok = time > 0n && await ed25519(v.raw, s.sig.slice(8), enc.encode(`cosignature/v1\ntime ${time}\n${body}`));
      }
    }
    if (!ok) throw new Error(`signature by ${s.name} does not verify`);
    if (!signed.includes(v)) signed.push(v);
  }
  return { body, signed };
}

export function parseCheckpoint(body) {
  const lines = body.split("\n");
  if (lines.length < 4 || lines.at(-1) !== "" || !/^(0|[1-9][0-9]{0,15})$/.test(lines[1])) throw new Error("not a checkpoint");
  const root = b64(lines[2]);
  if (root.length !== 32) throw new Error("checkpoint root is not 32 bytes");
  return { origin: lines[0], tree_size: Number(lines[1]), root_hash: bytesToHex(root) };
}

// Accept a checkpoint note: signed by the log (a key of `trustedRaw`, named by its origin) and
// cosigned by at least `policy.quorum` of `policy.witnesses` (verifier keys). Throws otherwise.
export async function acceptCheckpoint(text, trustedRaw, policy) {
  const { body } = splitNote(text);
  const cp = parseCheckpoint(body);
  if (policy.origin && cp.origin !== policy.origin) throw new Error(`checkpoint of another log (${cp.origin})`);
  const logKeys = await Promise.all(trustedRaw.map((raw) => logVerifier(cp.origin, raw)));
  const witnesses = await Promise.all((policy.witnesses || []).map(parseVerifierKey));
  if (witnesses.some((w) => w.alg !== ALG_COSIGNATURE_V1)) throw new Error("a witness key must be a cosignature/v1 key");
  const { signed } = await verifyNote(text, [...logKeys, ...witnesses]);
  if (!signed.some((v) => logKeys.includes(v))) throw new Error("the checkpoint is not signed by a trusted log key");
  const cosigners = signed.filter((v) => witnesses.includes(v)).map((v) => v.name);
  const quorum = policy.quorum || 0;
  if (cosigners.length < quorum) throw new Error(`checkpoint has ${cosigners.length} of the ${quorum} cosignatures required`);
  return { ...cp, cosigners, note: text };
}
