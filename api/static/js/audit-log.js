// The audit screen's log checks (docs/fairness.md 9): the latest checkpoint note against every
// checkpoint this browser remembered, or, given two log sizes, the log's append-only proof
// between the two signed checkpoints of those sizes. Signatures and cosignatures are checked
// under the pinned first key and the page's own witness policy (witness-policy.js).
import { get } from "./api.js";
import { t, num } from "./i18n.js";
import { keyChain, verifyConsistency, hexToBytes } from "./verify.js";
import { pinnedFirstKey, observeCheckpointNote, latestCheckpointNote, rememberedCheckpoints } from "./guard.js";
import { acceptCheckpoint } from "./notes.js";
import { WITNESS_POLICY } from "./witness-policy.js";

const MAX_PAGES = 20; // 20 000 checkpoints searched at most
const $ = (id) => document.getElementById(id);

async function signedCheckpointOf(size, trusted) {
  let after = 0;
  for (let page = 0; page < MAX_PAGES; page++) {
    const { checkpoints } = await get(`/log/checkpoints?after=${after}&limit=1000`);
    const found = checkpoints.find((c) => c.tree_size === size);
    if (found) return acceptCheckpoint(found.note, trusted, WITNESS_POLICY);
    if (checkpoints.length < 1000 || checkpoints.at(-1).tree_size > size) break;
    after = checkpoints.at(-1).id;
  }
  throw new Error(`${t("cons_no_checkpoint")} ${num(size)}`);
}

function show(ok, text) {
  $("cons-result").dataset.ok = String(ok);
  $("cons-result").textContent = `${ok ? "✔" : "✘"} ${text}`;
}

export async function checkConsistency() {
  // later keys only through rotation records signed by a key already trusted
  const listing = await get("/log/keys").catch(() => ({}));
  const trusted = Object.values(await keyChain(await pinnedFirstKey(), listing.key_rotations || []));
  const [a, b] = [$("cons-first").value, $("cons-second").value].map((v) => (v === "" ? null : Number(v)));
  if (a === null && b === null) {
    const stored = rememberedCheckpoints().length;
    const keys = Object.fromEntries(trusted.map((raw, i) => [i, raw]));
    const r = await observeCheckpointNote(await latestCheckpointNote(), keys);
    if (r.ok) show(true, `${t("treesize")} ${num(r.checkpoint.tree_size)}: ${t("cons_ok")} (${num(stored)})`);
    else show(false, r.evidence ? `${t("cons_split")}: ${JSON.stringify(r.evidence)}` : `${t("cons_refused")}: ${r.error}`);
    return;
  }
  if (!Number.isSafeInteger(a) || !Number.isSafeInteger(b) || a < 0 || a > b) { show(false, t("cons_sizes")); return; }
  const [first, second] = [await signedCheckpointOf(a, trusted), await signedCheckpointOf(b, trusted)];
  const proof = await get(`/log/proofs/consistency?first=${a}&second=${b}`);
  const ok = await verifyConsistency(a, b, hexToBytes(first.root_hash), hexToBytes(second.root_hash), proof.path.map(hexToBytes));
  show(ok, ok ? `${num(a)} → ${num(b)}: ${t("cons_pair_ok")}` : `${num(a)} → ${num(b)}: ${t("cons_split")}`);
}
