// The player's own fairness checks, in the browser, trusting nothing the server says about
// itself (docs/fairness.md 4.7 and 7): the page keeps its seed, commitment and receipt for each
// hand in localStorage, and when the hand ends it verifies the public transcript against them.
// It remembers the checkpoints it has seen and refuses one inconsistent with them (a split
// view), keeping both as evidence. Hooked into the table by three calls: remember(), onCommitClosed(), onHandEnded().
import { verifyTranscript, verifyReceipt, keyChain, verifySigned, verifyConsistency, hexToBytes } from "./verify.js";
import { t } from "./i18n.js";
import { acceptCheckpoint } from "./notes.js";
import { WITNESS_POLICY } from "./witness-policy.js";

const PREFIX = "mesa-own-";
const CHECKPOINTS = "mesa-checkpoints";
const FIRST_KEY = "mesa-first-key";
const MAX_KEPT = 200; // hands kept in localStorage; the oldest go first

async function getJson(path) {
  const r = await fetch(path, { credentials: "omit", headers: { accept: "application/json" } });
  if (!r.ok) throw new Error(`GET ${path}: HTTP ${r.status}`);
  return r.json();
}

function load(key, fallback) {
  try { const v = localStorage.getItem(key); return v === null ? fallback : JSON.parse(v); } catch { return fallback; }
}
function save(key, value) {
  localStorage.setItem(key, JSON.stringify(value));
}

// The log's first key, pinned on first use (docs/fairness.md 4.6): later keys must come with
// their rotation records.
export async function pinnedFirstKey() {
  let first = load(FIRST_KEY, null);
  if (!first) {
    const keys = await getJson("/log/keys");
    first = keys.keys[0]?.public_key;
    if (!first) throw new Error("the log publishes no key");
    save(FIRST_KEY, first);
  }
  return [first];
}

export function remember(dealId, seat, seed, commitment) {
  const own = load(PREFIX + dealId, {});
  save(PREFIX + dealId, { ...own, deal_id: dealId, seat, seed, commitment, at: Date.now() });
  const keys = Object.keys(localStorage).filter((k) => k.startsWith(PREFIX));
  if (keys.length > MAX_KEPT) {
    keys.map((k) => [k, load(k, {}).at || 0]).sort((a, b) => a[1] - b[1]).slice(0, keys.length - MAX_KEPT).forEach(([k]) => localStorage.removeItem(k));
  }
}

// A checkpoint seen anywhere (receipt, transcript): signed by a trusted key and consistent with
// every one remembered, else a split view.
export async function observeCheckpoint(env, keys) {
  const rec = await verifySigned(env, keys);
  return rememberConsistent(env, rec);
}

// The log's latest checkpoint note (`/log/checkpoint`): signed by a key of the trusted chain,
// cosigned as the page's pinned witness policy asks, then consistent with every checkpoint
// remembered (a refused note is not remembered; an inconsistent one is kept as evidence).
export async function observeCheckpointNote(text, keys, policy = WITNESS_POLICY) {
  let cp;
  try { cp = await acceptCheckpoint(text, Object.values(keys), policy); } catch (e) { return { ok: false, error: String(e.message || e) }; }
  const entry = { record: { tree_size: cp.tree_size, root_hash: cp.root_hash }, note: text };
  return { ...(await rememberConsistent(entry, entry.record)), checkpoint: cp };
}

export async function latestCheckpointNote() {
  const r = await fetch("/log/checkpoint", { credentials: "omit" });
  if (!r.ok) throw new Error(`GET /log/checkpoint: HTTP ${r.status}`);
  return r.text();
}

async function rememberConsistent(env, rec) {
  const seen = load(CHECKPOINTS, []);
  const same = (c) => c.record.tree_size === rec.tree_size;
  if (seen.some((c) => same(c) && c.record.root_hash === rec.root_hash)) return { ok: true };
  // The remembered ones were each proven consistent with the others, so the new one needs
  // proofs only against its nearest smaller and larger neighbours (consistency is transitive).
  const below = seen.filter((c) => c.record.tree_size <= rec.tree_size).sort((x, y) => y.record.tree_size - x.record.tree_size)[0];
  const above = seen.filter((c) => c.record.tree_size >= rec.tree_size).sort((x, y) => x.record.tree_size - y.record.tree_size)[0];
  for (const old of [below, above].filter(Boolean)) {
    const [a, b] = old.record.tree_size <= rec.tree_size ? [old, env] : [env, old];
    const proof = await getJson(`/log/proofs/consistency?first=${a.record.tree_size}&second=${b.record.tree_size}`);
    const ok = await verifyConsistency(a.record.tree_size, b.record.tree_size, hexToBytes(a.record.root_hash), hexToBytes(b.record.root_hash), proof.path.map(hexToBytes));
    if (!ok) return { ok: false, evidence: { remembered: old, offered: env } };
  }
  seen.push(env);
  save(CHECKPOINTS, seen.slice(-20));
  return { ok: true };
}

export function rememberedCheckpoints() { return load(CHECKPOINTS, []); }

const pendingReceipts = new Map();

// The commit phase closed: the seat's receipt must exist now, before any seed is revealed
// (the page reveals its seed only after this settles: see receiptBeforeReveal).
export function onCommitClosed(dealId) {
  const p = fetchReceipt(dealId).catch((e) => {
    const own = load(PREFIX + dealId, null);
    if (own) save(PREFIX + dealId, { ...own, receipt_error: String(e.message || e) });
    throw e;
  });
  pendingReceipts.set(dealId, p);
  if (pendingReceipts.size > 20) pendingReceipts.delete(pendingReceipts.keys().next().value);
  return p;
}

// Resolves once the receipt for `dealId` was checked (or failed): call before revealing.
export async function receiptBeforeReveal(dealId) {
  const p = pendingReceipts.get(dealId);
  if (p) await p.catch(() => null);
}

async function fetchReceipt(dealId) {
  const own = load(PREFIX + dealId, null);
  if (!own) return null;
  let receipt = null;
  // the record is appended right after the event that announced it: try a few times
  for (let i = 0; i < 8 && !receipt; i++) {
    try { receipt = await getJson(`/log/receipts/${dealId}`); } catch (e) {
      if (i === 7) throw e;
      await new Promise((r) => setTimeout(r, 250 * (i + 1)));
    }
  }
  const keys = await keyChain(await pinnedFirstKey(), []);
  const record = await verifyReceipt(receipt, keys);
  const mine = record.seats[own.seat];
  if (!mine || mine.commitment !== own.commitment) throw new Error("the receipt does not hold your commitment");
  save(PREFIX + dealId, { ...own, receipt });
  return receipt;
}

// Own checks of one finished hand: problems found (empty: your seed was used).
export async function checkHand(doc, own, firstKeys) {
  const problems = [];
  const checks = await verifyTranscript(doc, firstKeys, own.receipt || null);
  const wanted = ["signature", "seed_commitments", "server_seed_opening", "deal_recomputation", "merkle_inclusion", "checkpoint_signature", "seed_receipt", "result_record"];
  for (const c of checks) if (wanted.includes(c.name) && c.status !== "pass") problems.push(`${c.name}: ${c.detail}`);
  const entry = doc.player_seeds?.[own.seat];
  if (!entry || entry.seed !== own.seed) problems.push(`the transcript does not hold your seed (seat ${own.seat}: ${entry?.status})`);
  else if (entry.commitment !== own.commitment) problems.push("the transcript does not hold your commitment");
  if (!own.receipt) problems.push(`no receipt was given before the reveal (${own.receipt_error || "none fetched"})`);
  return { problems, checks };
}

function evidenceLink(dealId, bundle) {
  const blob = new Blob([JSON.stringify(bundle, null, 1)], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `mesa-evidence-${dealId.replaceAll("/", "_")}.json`;
  a.textContent = t("fair_evidence");
  a.dataset.test = "fair-evidence";
  return a;
}

// The mark lives in the shield's panel, under the seed status; the shield button itself
// carries the verdict (data-fair) so an alarm shows without opening the panel.
function markElement() {
  let m = document.getElementById("fair-mark");
  if (!m) {
    m = document.createElement("div");
    m.id = "fair-mark";
    m.setAttribute("role", "status");
    const status = document.getElementById("seed-status");
    if (status) status.after(m); else document.body.append(m);
  }
  return m;
}

function shieldVerdict(verdict) {
  const btn = document.getElementById("shield-btn");
  // an alarm stays until the page is reloaded: a later good hand does not hide it
  if (btn && btn.dataset.fair !== "alarm") btn.dataset.fair = verdict;
}

// The hand ended: fetch its public transcript and check it; show a quiet mark or an alarm.
// `history`: the event was replayed on opening the table; a hand checked before is not
// fetched again.
export async function onHandEnded(dealId, { history = false } = {}) {
  const own = load(PREFIX + dealId, null);
  if (!own) return null;
  if (history && own.checked) return null;
  const mark = markElement();
  const firstKeys = await pinnedFirstKey();
  let doc;
  for (let i = 0; i < 5 && !doc; i++) {
    try { doc = await getJson(`/log/transcripts/${dealId}`); } catch (e) { await new Promise((r) => setTimeout(r, 1000 * (i + 1))); }
  }
  if (!doc) { mark.textContent = t("fair_not_yet"); mark.dataset.test = "fair-error"; return null; }
  const { problems } = await checkHand(doc, own, firstKeys);
  const keys = await keyChain(firstKeys, doc.key_rotations);
  const view = await observeCheckpoint(doc.checkpoint, keys).catch((e) => ({ ok: false, error: String(e.message || e) }));
  if (!view.ok) problems.push(view.error || "split view: this checkpoint is inconsistent with one you saw before");
  const latest = await latestCheckpointNote().then((n) => observeCheckpointNote(n, keys)).catch((e) => ({ ok: false, error: String(e.message || e) }));
  if (!latest.ok) problems.push(latest.error || "split view: the log's latest checkpoint is inconsistent with one you saw before");
  save(PREFIX + dealId, { ...own, checked: problems.length ? "alarm" : "ok", problems });
  if (!problems.length) {
    mark.className = "fair-ok";
    mark.dataset.test = "fair-ok";
    mark.textContent = `✔ ${t("fair_ok")}`;
    shieldVerdict("ok");
    return { ok: true };
  }
  mark.className = "fair-alarm";
  mark.dataset.test = "fair-alarm";
  shieldVerdict("alarm");
  mark.replaceChildren(`✘ ${t("fair_alarm")}: ${problems.join("; ")} `, evidenceLink(dealId, {
    deal_id: dealId, your_seed: own.seed, your_commitment: own.commitment, receipt: own.receipt || null,
    transcript: doc, checkpoint: doc.checkpoint, remembered_checkpoints: rememberedCheckpoints(), split_view: view.evidence || latest.evidence || null,
  }));
  return { ok: false, problems };
}
