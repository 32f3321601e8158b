// Runs the page's checkpoint policy (api/static/js/notes.js, guard.js) under Node's WebCrypto
// on the cases the pytest wrote; prints one JSON line per case. localStorage and fetch are
// stand-ins: the remembered checkpoints and the log's consistency proofs (from the case file).
import { readFileSync } from "node:fs";

const data = JSON.parse(readFileSync(process.argv[2], "utf8"));
const store = new Map();
globalThis.localStorage = {
  getItem: (k) => (store.has(k) ? store.get(k) : null),
  setItem: (k, v) => store.set(k, String(v)),
  removeItem: (k) => store.delete(k),
};
globalThis.fetch = async (url) => {
  const u = new URL(url, "http://page");
  const key = `${u.searchParams.get("first")}-${u.searchParams.get("second")}`;
  const path = data.proofs[key];
  return { ok: !!path, status: path ? 200 : 404, json: async () => ({ path }) };
};
const { acceptCheckpoint } = await import("../../../api/static/js/notes.js");
const { observeCheckpointNote, rememberedCheckpoints } = await import("../../../api/static/js/guard.js");
const hex = (h) => Uint8Array.from(h.match(/../g), (x) => parseInt(x, 16));
const keys = { k: hex(data.log_key) };
for (const c of data.cases) {
  let out;
  if (c.observe) {
    const r = await observeCheckpointNote(c.note, keys, c.policy);
    out = { ok: r.ok, error: r.error || null, evidence: !!r.evidence, remembered: rememberedCheckpoints().length };
  } else {
    try {
      const cp = await acceptCheckpoint(c.note, Object.values(keys), c.policy);
      out = { ok: true, cosigners: cp.cosigners, size: cp.tree_size };
    } catch (e) {
      out = { ok: false, error: String(e.message || e) };
    }
  }
  console.log(JSON.stringify({ name: c.name, ...out }));
}
