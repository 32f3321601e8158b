// The page: sign in, then the screens the signed-in role may use.
import { api, get, post, el, money, idem, ApiError } from "./api.js";
import { t, setLang, getLang, applyI18n } from "./i18n.js";
import { Table } from "./table.js";
import { verifyTranscript, verifyConsistency, hexToBytes } from "./verify.js";
import { loadFinance, checkChain, showStatement } from "./finance.js";

const $ = (id) => document.getElementById(id);
let me = null;
let table = null;
let kinds = [];

const SCREENS = {
  player: ["lobby", "wallet", "history"],
  auditor: ["audit"],
  finance: ["finance"],
  admin: ["admin"],
};

function flash(msg, bad = false) {
  $("flash").textContent = msg;
  $("flash").className = bad ? "bad" : "";
}

async function guard(fn) {
  try { return await fn(); }
  catch (e) {
    flash(e instanceof ApiError ? `${e.code}: ${e.detail}` : String(e), true);
    if (e instanceof ApiError && e.status === 401) showLogin();
    return undefined;
  }
}

function show(name) {
  for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== `screen-${name}`;
  if (name !== "table" && table) { table.close(); table = null; }
  location.hash = name === "table" ? location.hash : name;
  const loaders = { lobby: loadLobby, wallet: loadWallet, history: loadHistory, audit: loadAudit, finance: () => guard(loadFinance), admin: loadAdmin };
  if (loaders[name]) guard(loaders[name]);
}

function showLogin() {
  me = null;
  $("nav").replaceChildren();
  $("who").textContent = "";
  $("logout").hidden = true;
  for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== "screen-login";
}

function signedIn(user) {
  me = user;
  $("who").textContent = `${user.display_name} (${user.role})`;
  $("who").dataset.test = "who";
  $("logout").hidden = false;
  const nav = $("nav");
  nav.replaceChildren();
  for (const s of SCREENS[user.role] || []) {
    nav.append(el("button", { type: "button", "data-i18n": s, "data-test": `nav-${s}`, text: t(s), onclick: () => show(s) }));
  }
  const wanted = location.hash.slice(1);
  const first = (SCREENS[user.role] || [])[0];
  if (wanted.startsWith("table/") && user.role === "player") openTable(wanted.slice(6));
  else show((SCREENS[user.role] || []).includes(wanted) ? wanted : first);
}

// ---------------------------------------------------------------- lobby
async function loadLobby() {
  const w = await get("/api/me/wallet");
  $("lobby-balance").textContent = money(w.balance);
  if (!kinds.length) {
    const k = await get("/api/lobby/kinds");
    kinds = k.kinds;
    $("kind-select").replaceChildren(...kinds.map((x) => el("option", { value: x.kind, text: x.title })));
    fillTiers();
  }
  const mine = await get("/api/lobby/mine");
  $("my-tables").replaceChildren(...mine.map((tb) => el("li", {},
    `${tb.kind} · ${tb.tier === "free" ? t("free") : "$" + tb.tier} · ${tb.status} · ${tb.seats.filter((s) => s.player || s.bot).length}/${tb.seat_count} `,
    tb.invite_code ? el("code", { text: tb.invite_code }) : "",
    tb.match_id ? el("button", { type: "button", text: t("open"), "data-test": "open-table", onclick: () => openTable(tb.match_id) })
      : el("button", { type: "button", text: "✕", onclick: () => guard(async () => { await post("/api/lobby/leave", { table_id: tb.table_id }); loadLobby(); }) }),
  )));
  if (!$("invites-in").childElementCount) await loadInvitations();
  const open = await get("/api/lobby/tables");
  $("open-tables").replaceChildren(...open.tables.map((tb) => el("li", { text: `${tb.kind} · $${tb.tier} · ${tb.taken}/${tb.seat_count}` })));
  const started = mine.find((tb) => tb.match_id && tb.status !== "voided");
  if (started && $("screen-lobby").hidden === false && !table) openTable(started.match_id);
}

// ---------------------------------------------------------------- invitations
function inviteWhat(inv) {
  if (inv.op === "code") return `${t("bycode")} ${inv.invite_code}`;
  return `${inv.kind} · ${inv.tier === "free" ? t("free") : "$" + inv.tier}`;
}

function secondsLeft(inv) {
  return Math.max(0, Math.round((Date.parse(inv.expires_at) - Date.now()) / 1000));
}

function inviteButton(label, who, action, inv) {
  const b = el("button", { type: "button", text: t(label), "data-test": `invite-${action}`,
    onclick: () => guard(async () => {
      const r = await post(`/api/invitations/${inv.invitation_id}/${action}`);
      if (action === "accept") {
        flash(t("accepted"));
        if (r.table.match_id) openTable(r.table.match_id);
        else loadLobby();
      } else loadInvitations();
    }) });
  b.setAttribute("aria-label", `${t(label)}: ${who} · ${inviteWhat(inv)}`);
  return b;
}

async function loadInvitations() {
  const inv = await get("/api/invitations");
  const none = () => el("li", { text: t("noinvites") });
  $("invites-in").replaceChildren(...(inv.incoming.length ? inv.incoming.map((i) => el("li", {},
    `${i.inviter} ${t("invitedyou")} · ${inviteWhat(i)} · ${t("expiresin")} ${secondsLeft(i)} s `,
    inviteButton("accept", i.inviter, "accept", i), " ",
    inviteButton("decline", i.inviter, "decline", i))) : [none()]));
  $("invites-out").replaceChildren(...(inv.outgoing.length ? inv.outgoing.map((i) => el("li", {},
    `${t("youinvited")} ${i.invitee} · ${inviteWhat(i)} · ${t("expiresin")} ${secondsLeft(i)} s `,
    inviteButton("cancel", i.invitee, "cancel", i))) : [none()]));
}

// A join that names a partner answers with an invitation (nobody is seated until he accepts).
function joinedOrInvited(r) {
  if (r && r.invitation_id !== undefined) {
    flash(`${t("invitesent")} ${r.invitee}`);
    loadInvitations();
    return true;
  }
  return false;
}

function fillTiers() {
  const k = kinds.find((x) => x.kind === $("kind-select").value) || kinds[0];
  if (!k) return;
  $("tier-select").replaceChildren(...k.tiers.map((tr) => el("option", { value: tr.tier, text: tr.tier === "free" ? t("free") : money(tr.stake_cents) })));
}

let lobbyPoll = null;
let invitePoll = null;
function pollLobby() {
  clearInterval(lobbyPoll);
  clearInterval(invitePoll);
  lobbyPoll = setInterval(() => { if (!$("screen-lobby").hidden) guard(loadLobby); }, 1500);
  invitePoll = setInterval(() => { if (me && !$("screen-lobby").hidden) guard(loadInvitations); }, 3000);
}

function openTable(matchId) {
  for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== "screen-table";
  location.hash = `table/${matchId}`;
  flash("");
  if (table) table.close();
  table = new Table(matchId, me, () => {});
}

// ---------------------------------------------------------------- wallet & history
async function loadWallet() {
  const w = await get("/api/me/wallet");
  $("wallet-balance").textContent = money(w.balance);
  $("wallet-balance").dataset.cents = String(w.balance);
  const st = await get("/api/me/statement");
  $("statement").replaceChildren(...st.lines.slice().reverse().slice(0, 200).map((l) => el("tr", {},
    el("td", { text: String(l.created_at).replace("T", " ").slice(0, 19) }),
    el("td", { text: `${l.kind}${l.match_id ? " " + l.match_id : ""}${l.reference ? " · " + l.reference : ""}` }),
    el("td", { text: money(l.amount) }), el("td", { text: money(l.balance) }))));
}

async function trustedKeys() {
  const k = await get("/api/audit/keys");
  return k.keys.map((x) => x.public_key);
}

async function verifyInto(panel, dealId) {
  panel.replaceChildren(el("p", { text: `${t("verify")} ${dealId} ${t("pending")}` }));
  const doc = await get(`/api/transcripts/${dealId}`);
  const keys = await trustedKeys();
  const checks = await verifyTranscript(doc, keys);
  const ok = checks.every((c) => c.status === "pass");
  panel.replaceChildren(
    el("h3", { "data-test": "verify-result", "data-ok": String(ok), text: `${dealId}: ${ok ? "✔ " + t("verified") : "✘ " + t("failed")}` }),
    el("ul", { class: "checks" }, ...checks.map((c) => el("li", { class: c.status, "data-check": c.name, text: `${c.status === "pass" ? "✔" : "✘"} ${c.name} ${c.detail}` }))),
  );
}

async function loadHistory() {
  const h = await get("/api/history");
  $("history-list").replaceChildren(...h.transcripts.map((x) => el("li", {},
    `${x.deal_id} · ${x.variant} `,
    el("button", { type: "button", text: t("verify"), "data-test": "verify-hand", onclick: () => guard(() => verifyInto($("verify-panel"), x.deal_id)) }))));
}

// ---------------------------------------------------------------- audit
async function loadAudit() {
  const keys = await get("/api/audit/keys");
  $("audit-keys").textContent = keys.keys.map((k) => `${k.key_id}\n${k.public_key}\n${k.pem}`).join("\n");
  try { $("audit-checkpoint").textContent = JSON.stringify(await get("/api/audit/checkpoint"), null, 1); }
  catch (e) { $("audit-checkpoint").textContent = String(e.message); }
  $("audit-orphans").textContent = JSON.stringify((await get("/api/audit/orphans")).orphans);
  const list = await get("/api/audit/transcripts?limit=50");
  $("audit-list").replaceChildren(...list.transcripts.map((x) => el("li", {},
    `${x.deal_id} · ${x.variant} · ${x.players.join(", ")} `,
    el("button", { type: "button", text: t("verify"), "data-test": "audit-verify-hand", onclick: () => guard(() => verifyInto($("audit-verify-panel"), x.deal_id)) }))));
}

async function checkConsistency() {
  const first = Number($("cons-first").value), second = Number($("cons-second").value);
  const p = await get(`/api/audit/proofs/consistency?first=${first}&second=${second}`);
  const leaves = await get(`/api/audit/leaves?start=0&end=0`);
  // The roots come from two signed checkpoints the auditor kept; here: ask for both sizes.
  $("cons-result").textContent = `${p.path.length} hashes (tree ${leaves.tree_size}); verify against your saved checkpoints`;
  return { p, verifyConsistency, hexToBytes };
}

// ---------------------------------------------------------------- admin
async function loadAdmin() {
  const users = await get("/api/admin/users");
  $("admin-users").replaceChildren(...users.map((u) => el("li", {}, `${u.id} · ${u.role} · ${u.status} `,
    el("button", { type: "button", text: u.status === "locked" ? "unlock" : "lock", onclick: () => guard(async () => { await api("PATCH", `/api/admin/users/${u.id}`, { status: u.status === "locked" ? "active" : "locked" }); loadAdmin(); }) }))));
}

// ---------------------------------------------------------------- wiring
function wire() {
  $("lang").onclick = () => { setLang(getLang() === "es" ? "en" : "es"); if (me) signedIn(me); };
  $("login-form").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    guard(async () => { const r = await post("/api/auth/login", { username: f.get("username"), password: f.get("password") }); flash(""); signedIn(r.user); });
  };
  $("register").onclick = () => {
    const f = new FormData($("login-form"));
    guard(async () => { const r = await post("/api/auth/register", { username: f.get("username"), password: f.get("password") }); signedIn(r.user); });
  };
  $("logout").onclick = () => guard(async () => { await post("/api/auth/logout"); showLogin(); });
  $("kind-select").onchange = fillTiers;
  $("join-form").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = { kind: f.get("kind"), tier: f.get("tier"), idempotency_key: idem() };
    if (f.get("partner")) body.partner = String(f.get("partner")).toLowerCase();
    guard(async () => { const r = await post("/api/lobby/quick-join", body); if (!joinedOrInvited(r)) flash(t("waiting")); loadLobby(); });
  };
  $("private-btn").onclick = () => {
    const f = new FormData($("join-form"));
    const body = { kind: f.get("kind"), tier: f.get("tier"), idempotency_key: idem() };
    if (f.get("partner")) body.partner = String(f.get("partner")).toLowerCase();
    guard(async () => { const r = await post("/api/lobby/private", body); if (!joinedOrInvited(r)) flash(`${t("invite")}: ${r.invite_code}`); loadLobby(); });
  };
  $("cpu-btn").onclick = () => {
    const f = new FormData($("join-form"));
    guard(async () => { const r = await post("/api/lobby/cpu", { kind: f.get("kind"), idempotency_key: idem() }); if (r.match_id) openTable(r.match_id); else loadLobby(); });
  };
  $("code-form").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = { invite_code: String(f.get("code")).toUpperCase(), idempotency_key: idem() };
    if (f.get("partner")) body.partner = String(f.get("partner")).toLowerCase();
    guard(async () => { const r = await post("/api/lobby/join-code", body); joinedOrInvited(r); loadLobby(); });
  };
  $("back-lobby").onclick = () => show("lobby");
  $("self-exclude").onclick = () => guard(async () => { const u = await post("/api/me/self-exclusion", { days: 30 }); flash(`${u.status} → ${u.excluded_until}`); });
  $("audit-refresh").onclick = () => guard(loadAudit);
  $("audit-verify").onclick = () => guard(() => verifyInto($("audit-verify-panel"), $("audit-deal").value.trim()));
  $("cons-check").onclick = () => guard(checkConsistency);
  $("fin-refresh").onclick = () => guard(loadFinance);
  $("fin-chain").onclick = () => guard(checkChain);
  $("fin-statement-form").onsubmit = (ev) => { ev.preventDefault(); guard(() => showStatement(new FormData(ev.target).get("player"))); };
  $("cashier-form").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const op = ev.submitter?.value === "withdraw" ? "withdrawals" : "deposits";
    const cents = Math.round(Number(f.get("amount")) * 100);
    guard(async () => {
      const r = await post(`/api/finance/${op}`, { player: String(f.get("player")).toLowerCase(), amount: cents, reference: f.get("reference"), idempotency_key: idem() });
      flash(`${r.kind} ${money(r.amount)} → ${r.player}: ${money(r.balance)}`);
      loadFinance();
    });
  };
  $("admin-create").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    guard(async () => { await post("/api/admin/users", { username: f.get("username"), password: f.get("password"), role: f.get("role") }); loadAdmin(); });
  };
}

async function main() {
  applyI18n();
  wire();
  pollLobby();
  try { signedIn(await get("/api/me")); } catch { showLogin(); }
}
main();
