// An independent verifier of docs/fairness.md in the browser, on WebCrypto only:
// SHA-256, HMAC-SHA256 (mesa-shuffle-v1) and Ed25519 (signatures). Nothing here trusts the
// server's own verdict: the transcript and the pinned public keys are the only inputs.
const enc = new TextEncoder();
const HEX = /^[0-9a-f]*$/;

export function hexToBytes(h) {
  if (typeof h !== "string" || h.length % 2 || !HEX.test(h)) throw new Error("not lowercase hex");
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.substr(i * 2, 2), 16);
  return out;
}
export function bytesToHex(b) {
  return Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");
}
function concat(...parts) {
  const n = parts.reduce((s, p) => s + p.length, 0);
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}
async function sha256(bytes) { return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)); }
export async function sha256hex(bytes) { return bytesToHex(await sha256(bytes)); }

// Section 4.1: sorted keys, no whitespace, integers only.
export function canonical(value) {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) throw new Error("non-integer number in signed data");
    return String(value);
  }
  if (Array.isArray(value)) return "[" + value.map(canonical).join(",") + "]";
  const keys = Object.keys(value).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonical(value[k])).join(",") + "}";
}

export async function keyId(rawPub) { return sha256hex(rawPub); }

async function ed25519Verify(rawPub, sigHex, message) {
  const key = await crypto.subtle.importKey("raw", rawPub, { name: "Ed25519" }, false, ["verify"]);
  return crypto.subtle.verify({ name: "Ed25519" }, key, hexToBytes(sigHex), message);
}

export async function verifySigned(env, keys) {
  const rec = env.record;
  const pub = keys[rec.key_id];
  if (!pub) throw new Error(`key ${String(rec.key_id).slice(0, 12)}… is not trusted`);
  if (typeof env.signature !== "string" || env.signature.length !== 128) throw new Error("signature must be 128 hex digits");
  const ok = await ed25519Verify(pub, env.signature, enc.encode(canonical(rec)));
  if (!ok) throw new Error("Ed25519 signature does not verify");
  return rec;
}

// Section 3: mesa-shuffle-v1.
class Keystream {
  constructor(key, dealId, seeds) { this.key = key; this.prefix = ["mesa-shuffle-v1", dealId, ...seeds].join("|") + "|"; this.buf = new Uint8Array(0); this.pos = 0; this.block = 0; }
  async more() {
    const mac = new Uint8Array(await crypto.subtle.sign("HMAC", this.key, enc.encode(this.prefix + String(this.block))));
    this.block += 1;
    this.buf = concat(this.buf.slice(this.pos), mac);
    this.pos = 0;
  }
  async u32() {
    while (this.buf.length - this.pos < 4) await this.more();
    const b = this.buf;
    const p = this.pos;
    this.pos += 4;
    return ((b[p] << 24) >>> 0) + (b[p + 1] << 16) + (b[p + 2] << 8) + b[p + 3];
  }
  async below(n) {
    const limit = 2 ** 32 - (2 ** 32 % n);
    for (;;) { const x = await this.u32(); if (x < limit) return x % n; }
  }
}

const hmacKey = (serverSeedHex) => crypto.subtle.importKey("raw", hexToBytes(serverSeedHex), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);

// Section 3.1: the opening draws' outcomes.
export async function drawOutcome(purpose, serverSeedHex, dealId, seeds) {
  const ks = new Keystream(await hmacKey(serverSeedHex), dealId, seeds);
  if (purpose === "cuban_draw") {
    const tiles = [];
    for (let a = 0; a <= 9; a++) for (let b = a; b <= 9; b++) tiles.push([a, b]);
    const rounds = [];
    for (let n = 0; n < 10000; n++) {
      const t0 = tiles[await ks.below(55)];
      const t1 = tiles[await ks.below(55)];
      rounds.push([t0, t1]);
      if (t0[0] + t0[1] !== t1[0] + t1[1]) return { opening_side: t0[0] + t0[1] > t1[0] + t1[1] ? 0 : 1, rounds };
    }
    throw new Error("the draw does not end");
  }
  if (purpose !== "pares_o_nones") throw new Error(`${purpose} is not an opening draw`);
  const f0 = await ks.below(6), f1 = await ks.below(6);
  return { opening_side: (f0 + f1) % 2, fingers: [f0, f1] };
}

// Section 4.5: the seed of a seat the house plays.
export async function cpuSeed(serverSeedHex, dealId, seat) {
  const mac = await crypto.subtle.sign("HMAC", await hmacKey(serverSeedHex), enc.encode(`mesa-cpu-seed-v1|${dealId}|${seat}`));
  return bytesToHex(mac);
}

// Section 4.6: the pinned first key, then every key a rotation signed by a trusted key names.
export async function keyChain(firstHex, rotations) {
  const keys = {};
  for (const h of firstHex) { const raw = hexToBytes(h); keys[await keyId(raw)] = raw; }
  for (const env of rotations || []) {
    const r = await verifySigned(env, keys);
    if (r.type !== "key_rotation") throw new Error("a key chain entry is not a key_rotation record");
    const raw = hexToBytes(r.new_public_key);
    if (raw.length !== 32 || (await keyId(raw)) !== r.new_key_id) throw new Error("key_rotation: the new key does not match its id");
    keys[r.new_key_id] = raw;
  }
  return keys;
}

export async function shuffle(serverSeedHex, dealId, seeds, N) {
  const ks = new Keystream(await hmacKey(serverSeedHex), dealId, seeds);
  const tiles = [];
  for (let a = 0; a <= N; a++) for (let b = a; b <= N; b++) tiles.push(`${a}-${b}`);
  for (let i = tiles.length - 1; i >= 1; i--) {
    const j = await ks.below(i + 1);
    [tiles[i], tiles[j]] = [tiles[j], tiles[i]];
  }
  return tiles;
}

// Section 5: RFC 9162 inclusion and consistency.
const leafHash = (data) => sha256(concat(new Uint8Array([0]), data));
const nodeHash = (l, r) => sha256(concat(new Uint8Array([1]), l, r));
const eq = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

export async function verifyInclusion(index, size, leaf, path, root) {
  if (!(index < size)) return false;
  let fn = index, sn = size - 1, r = leaf;
  for (const p of path) {
    if (sn === 0) return false;
    if ((fn & 1) === 1 || fn === sn) {
      r = await nodeHash(p, r);
      if ((fn & 1) === 0) while (fn !== 0 && (fn & 1) === 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
    } else {
      r = await nodeHash(r, p);
    }
    fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
  }
  return sn === 0 && eq(r, root);
}

export async function verifyConsistency(first, second, firstRoot, secondRoot, path) {
  if (first === second) return path.length === 0 && eq(firstRoot, secondRoot);
  if (first === 0 || first > second || path.length === 0) return first === 0 && path.length === 0;
  let proof = path;
  if ((first & (first - 1)) === 0) proof = [firstRoot, ...path];
  let fn = first - 1, sn = second - 1;
  while (fn & 1) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
  let fr = proof[0], sr = proof[0];
  for (const c of proof.slice(1)) {
    if (sn === 0) return false;
    if ((fn & 1) || fn === sn) {
      fr = await nodeHash(c, fr); sr = await nodeHash(c, sr);
      if (!(fn & 1)) while (!(fn & 1) && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
  }
  return sn === 0 && eq(fr, firstRoot) && eq(sr, secondRoot);
}

export async function leafIncluded(env, inc, checkpointRecord) {
  if (!inc) throw new Error("no inclusion proof");
  if (inc.tree_size !== checkpointRecord.tree_size) throw new Error(`proof for size ${inc.tree_size}, checkpoint has ${checkpointRecord.tree_size}`);
  const leaf = await leafHash(enc.encode(canonical({ record: env.record, signature: env.signature })));
  if (!(await verifyInclusion(inc.leaf_index, inc.tree_size, leaf, inc.path.map(hexToBytes), hexToBytes(checkpointRecord.root_hash)))) throw new Error("audit path does not lead to the checkpoint's root");
}

// Section 4.7: a seed receipt under the trusted keys.
export async function verifyReceipt(receipt, keys) {
  const r = await verifySigned(receipt.record, keys);
  if (r.type !== "seed_commitments" || r.deal_id !== receipt.deal_id) throw new Error("the receipt holds no seed_commitments record for its deal");
  const cp = await verifySigned(receipt.checkpoint, keys);
  if (cp.type !== "checkpoint") throw new Error("the receipt's checkpoint is not a checkpoint");
  await leafIncluded(receipt.record, receipt.inclusion, cp);
  return r;
}

const CANONICAL_TILE = (N) => { const ok = new Set(); for (let a = 0; a <= N; a++) for (let b = a; b <= N; b++) ok.add(`${a}-${b}`); return ok; };

// Section 7: the nine checks, each independent. `trustedHex`: the pinned first key(s).
export async function verifyTranscript(doc, trustedHex, receipt = null) {
  let keys = {};
  let chainError = null;
  try { keys = await keyChain(trustedHex, doc.key_rotations); } catch (e) { chainError = e; }
  const rec = doc.commitment?.record || {};
  const isDraw = rec.purpose === "cuban_draw" || rec.purpose === "pares_o_nones";
  const checkDraw = async () => {
    if (doc.deal.hands.length || doc.deal.stock.length || doc.moves.length || doc.opener !== null) throw new Error("an opening draw deals no tiles and has no moves");
    const got = await drawOutcome(rec.purpose, doc.server_seed, doc.deal_id, doc.player_seeds.map((e) => e.seed));
    if (canonical(got) !== canonical(doc.result)) throw new Error("the draw's result differs from the recomputed draw");
    return `side ${got.opening_side} opens`;
  };
  const checks = [];
  const run = async (name, fn) => {
    try { const detail = await fn(); checks.push({ name, status: "pass", detail: detail || "" }); }
    catch (e) { checks.push({ name, status: "fail", detail: String(e.message || e) }); }
  };
  await run("signature", async () => {
    if (chainError) throw chainError;
    const r = await verifySigned(doc.commitment, keys);
    if (r.type !== "commitment") throw new Error("not a commitment record");
    return `key ${r.key_id.slice(0, 12)}…`;
  });
  await run("seed_commitments", async () => {
    const seats = rec.seats || [];
    if (!Array.isArray(doc.player_seeds) || doc.player_seeds.length !== seats.length) throw new Error("one seed entry per seat is required");
    for (const [i, e] of doc.player_seeds.entries()) {
      if (e.seat !== i) throw new Error(`entry ${i} names seat ${e.seat}`);
      if (!/^[A-Za-z0-9_-]{0,64}$/.test(e.seed)) throw new Error(`seat ${i}: seed outside the alphabet`);
      if (e.status === "revealed") {
        if ((await sha256hex(enc.encode(e.seed))) !== e.commitment) throw new Error(`seat ${i}: SHA-256(seed) differs from its commitment`);
      } else if (e.status === "no_commitment") {
        if (e.commitment !== null || e.seed !== "") throw new Error(`seat ${i}: must have no commitment and the empty seed`);
      } else if (e.status === "not_revealed") {
        if (typeof e.commitment !== "string" || e.commitment.length !== 64 || e.seed !== "") throw new Error(`seat ${i}: bad unrevealed entry`);
      } else throw new Error(`seat ${i}: unknown status`);
    }
    return `${doc.player_seeds.length} seats`;
  });
  await run("server_seed_opening", async () => {
    if (!/^[0-9a-f]{64}$/.test(doc.server_seed)) throw new Error("server seed must be 64 lowercase hex digits");
    const c = await sha256hex(hexToBytes(doc.server_seed));
    if (c !== rec.commitment) throw new Error("SHA-256(server seed) is not the commitment");
    return c.slice(0, 16) + "…";
  });
  await run("deal_recomputation", async () => {
    if (doc.deal_id !== rec.deal_id) throw new Error("deal id differs from the committed one");
    if (isDraw) return checkDraw();
    if ((rec.purpose ?? "deal") !== "deal") throw new Error("commitment is not for a deal");
    const valid = CANONICAL_TILE(rec.tile_set);
    for (const tile of [...doc.deal.hands.flat(), ...doc.deal.stock, ...doc.moves.map((m) => m.tile)]) {
      if (!valid.has(tile)) throw new Error(`tile ${tile} is not in canonical form a-b (a <= b)`);
    }
    const seeds = doc.player_seeds.map((e) => e.seed);
    const order = await shuffle(doc.server_seed, rec.deal_id, seeds, rec.tile_set);
    const k = rec.seats.length, H = rec.hand_size;
    for (let s = 0; s < k; s++) {
      if (order.slice(s * H, (s + 1) * H).join(" ") !== (doc.deal.hands[s] || []).join(" ")) throw new Error(`seat ${s}'s hand differs from the recomputed deal`);
    }
    if (order.slice(k * H).join(" ") !== doc.deal.stock.join(" ")) throw new Error("stock differs from the recomputed deal");
    return `${order.length} tiles`;
  });
  await run("replay", async () => {
    if (isDraw) return checkDraw();
    // The rules engine is not re-implemented here: this checks that every move is a tile
    // dealt to the seat that played it, used once; `mesa audit verify` replays fully.
    const owner = {};
    doc.deal.hands.forEach((h, s) => h.forEach((tile) => { owner[tile] = s; }));
    const used = new Set();
    for (const m of doc.moves) {
      const [a, b] = m.tile.split("-").map(Number);
      const tile = `${Math.min(a, b)}-${Math.max(a, b)}`;
      if (used.has(tile)) throw new Error(`${tile} played twice`);
      used.add(tile);
      if (!(tile in owner) && !doc.deal.stock.includes(tile)) throw new Error(`${tile} was not dealt`);
      if (m.seat !== undefined && m.seat !== null && tile in owner && owner[tile] !== m.seat) throw new Error(`${tile} was not in seat ${m.seat}'s hand`);
    }
    return `${doc.moves.length} moves consistent with the deal (partial)`;
  });
  await run("merkle_inclusion", async () => {
    const cp = doc.checkpoint.record;
    const inc = doc.inclusion;
    if (inc.tree_size !== cp.tree_size) throw new Error(`proof for size ${inc.tree_size}, checkpoint has ${cp.tree_size}`);
    const leaf = await leafHash(enc.encode(canonical({ record: doc.commitment.record, signature: doc.commitment.signature })));
    const ok = await verifyInclusion(inc.leaf_index, inc.tree_size, leaf, inc.path.map(hexToBytes), hexToBytes(cp.root_hash));
    if (!ok) throw new Error("audit path does not lead to the checkpoint's root");
    return `leaf ${inc.leaf_index} of ${inc.tree_size}`;
  });
  await run("checkpoint_signature", async () => {
    const r = await verifySigned(doc.checkpoint, keys);
    if (r.type !== "checkpoint") throw new Error("not a checkpoint record");
    return `tree ${r.tree_size}`;
  });
  await run("seed_receipt", async () => {
    if (!doc.seed_record) throw new Error("no logged seed_commitments record: the seeds are unreceipted");
    const r = await verifySigned(doc.seed_record, keys);
    if (r.type !== "seed_commitments" || r.deal_id !== doc.deal_id || r.commitment !== rec.commitment) throw new Error("the seed record is for another deal");
    if (!Array.isArray(r.seats) || r.seats.length !== doc.player_seeds.length) throw new Error("the seed record has not one entry per seat");
    for (const [i, e] of doc.player_seeds.entries()) {
      const logged = r.seats[i];
      if (logged.seat !== i) throw new Error(`seed record entry ${i} names another seat`);
      if (logged.commitment !== e.commitment) throw new Error(`seat ${i}: the transcript's seed commitment is not the logged one (the seed was substituted)`);
      if (logged.source === "cpu" && (e.status !== "revealed" || e.seed !== (await cpuSeed(doc.server_seed, doc.deal_id, i)))) throw new Error(`seat ${i}: the CPU seed is not the committed formula's`);
    }
    await leafIncluded(doc.seed_record, doc.seed_inclusion, doc.checkpoint.record);
    if (receipt) {
      await verifyReceipt(receipt, keys);
      if (canonical(receipt.record) !== canonical(doc.seed_record)) throw new Error("the transcript's seed record differs from your receipt");
    }
    return receipt ? "matches your receipt" : `${r.seats.length} seats logged before the reveal`;
  });
  await run("result_record", async () => {
    if (!doc.result_record) throw new Error("no logged result record");
    const r = await verifySigned(doc.result_record, keys);
    if (r.type !== "result" || r.deal_id !== doc.deal_id || r.commitment !== rec.commitment) throw new Error("the result record is for another deal");
    if (r.server_seed !== doc.server_seed) throw new Error("logged result record: server_seed differs");
    if (canonical(r.seeds) !== canonical(doc.player_seeds.map((e) => e.seed))) throw new Error("logged result record: seeds differ");
    if (r.moves_sha256 !== (await sha256hex(enc.encode(canonical(doc.moves))))) throw new Error("logged result record: moves differ");
    if (canonical(r.result) !== canonical(doc.result)) throw new Error("logged result differs from the transcript's result");
    await leafIncluded(doc.result_record, doc.result_inclusion, doc.checkpoint.record);
    return "equal to the transcript";
  });
  return checks;
}
