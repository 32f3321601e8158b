// The page: sign in, then the screens the signed-in role may use.
import { api, get, post, el, idem, ApiError } from "./api.js";
import { t, has, setLang, getLang, applyI18n, money, num, dateTime } from "./i18n.js";
import { Table } from "./table.js";
import { verifyTranscript } from "./verify.js";
import { pinnedFirstKey } from "./guard.js";
import { checkConsistency } from "./audit-log.js";
import { loadFinance, checkChain, showStatement, cashierRefusal } from "./finance.js";
import { loadClosing } from "./closing.js";
import { loadLimits, scheduleReminder, stopReminders } from "./limits.js";
import { loadSupport } from "./support.js";
import { loadStaff } from "./staff.js";
import { openReplay } from "./replay.js";
import { loadCompliance, initCompliance } from "./compliance.js";
import { openReport, loadRandomOnly } from "./report.js";
import { loadReconcile } from "./reconcile.js";
import { loadVerification } from "./identity.js";
import { renderInvitations } from "./invitations.js";

const $ = (id) => document.getElementById(id);
let me = null;
let table = null;
let kinds = [];

const SCREENS = {
  player: ["lobby", "wallet", "history"],
  auditor: ["audit", "staff"],
  finance: ["finance", "reconcile"],
  admin: ["admin", "staff"],
  support: ["support"],
  compliance: ["compliance"],
};

let flashTimer = null;
function flash(msg, bad = false) {
  $("flash").textContent = msg;
  $("flash").className = bad ? "flash bad" : "flash";
  clearTimeout(flashTimer);
  if (msg) flashTimer = setTimeout(() => { $("flash").textContent = ""; }, bad ? 8000 : 4000);
}

// A refusal in the player's words: the reason's own string when the page has one.
function reasonText(e) {
  if (e instanceof ApiError) return has("err_" + e.code) ? t("err_" + e.code) : `${e.detail || t("err_generic")}`;
  return t("err_generic");
}

async function guard(fn) {
  try { return await fn(); }
  catch (e) {
    flash(reasonText(e), true);
    if (e instanceof ApiError && e.status === 401) showLogin();
    return undefined;
  }
}

function show(name) {
  for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== `screen-${name}`;
  if (name !== "table" && table) { table.close(); table = null; }
  location.hash = name === "table" ? location.hash : name;
  for (const b of $("nav").querySelectorAll("button")) {
    if (b.dataset.test === `nav-${name}`) b.setAttribute("aria-current", "page"); else b.removeAttribute("aria-current");
  }
  const loaders = { lobby: loadLobby, wallet: loadWallet, history: loadHistory, audit: loadAudit, finance: () => guard(async () => { await loadFinance(); await loadClosing(me); }), reconcile: loadReconcile, admin: loadAdmin, support: loadSupport, staff: loadStaff, compliance: () => guard(loadCompliance) };
  if (loaders[name]) guard(loaders[name]);
}

function showLogin() {
  me = null;
  stopReminders();
  $("nav").replaceChildren();
  $("who").textContent = "";
  $("logout").hidden = true;
  for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== "screen-login";
}

function signedIn(user) {
  me = user;
  $("who").textContent = user.display_name;
  $("who").dataset.test = "who";
  $("logout").hidden = false;
  const nav = $("nav");
  nav.replaceChildren();
  for (const s of SCREENS[user.role] || []) {
    nav.append(el("button", { type: "button", "data-i18n": s, "data-test": `nav-${s}`, text: t(s), onclick: () => show(s) }));
  }
  if (user.role === "player") scheduleReminder();
  const wanted = location.hash.slice(1);
  const first = (SCREENS[user.role] || [])[0];
  if (wanted.startsWith("table/") && user.role === "player") guard(() => openFromLink(wanted.slice(6)));
  else show((SCREENS[user.role] || []).includes(wanted) ? wanted : first);
}

// ---------------------------------------------------------------- lobby
const remembered = {
  get kind() { try { return localStorage.getItem("mesa-kind"); } catch { return null; } },
  get tier() { try { return localStorage.getItem("mesa-tier"); } catch { return null; } },
  save(kind, tier) { try { localStorage.setItem("mesa-kind", kind); if (tier) localStorage.setItem("mesa-tier", tier); } catch { /* not remembered */ } },
};
let selectedKind = null;
let openTables = [];

function kindInfo(kind) { return kinds.find((k) => k.kind === kind); }
function kindTitle(kind) { return kindInfo(kind)?.title || kind; }
function stakeText(tb) { return tb.tier === "free" ? t("free") : money(tb.stake_cents ?? Math.round(Number(tb.tier) * 100), tb.currency || "USD"); }
function statusText(s) { return has("status_" + s) ? t("status_" + s) : s; }
function emptyItem(key) { return el("li", { class: "empty", text: t(key) }); }

function tierOf(k, tier) { return k.tiers.find((x) => x.tier === tier); }

function renderKindCards() {
  const box = $("kind-cards");
  box.replaceChildren(...kinds.map((k) => {
    const waiting = openTables.filter((tb) => tb.kind === k.kind);
    const taken = waiting.reduce((m, tb) => Math.max(m, tb.taken), 0);
    const paid = k.tiers.filter((x) => x.tier !== "free");
    const range = paid.length ? `${money(paid[0].stake_cents)}–${money(paid[paid.length - 1].stake_cents)}` : t("free");
    const b = el("button", { type: "button", class: "kind-card", "data-kind": k.kind, "data-test": `kind-${k.kind}`, onclick: () => selectKind(k.kind) },
      el("span", { class: "k-title", text: k.title }),
      el("span", { class: "k-desc", text: t("desc_" + k.variant) }),
      el("span", { class: "k-meta", text: `${t("stake")} ${range} · ${num(k.seat_count)} ${t("seatsword")}${k.pairs ? ` (${t("pairsword")})` : ""}${waiting.length ? ` · ${num(taken)}/${num(k.seat_count)} ${t("seatsfilled")}` : ""}` }));
    b.setAttribute("aria-pressed", String(k.kind === selectedKind));
    return b;
  }));
}

function selectKind(kind, tier) {
  const k = kindInfo(kind) || kinds[0];
  if (!k) return;
  selectedKind = k.kind;
  $("kind-input").value = k.kind;
  const prev = tier || $("tier-select").value || remembered.tier;
  $("tier-select").replaceChildren(...k.tiers.map((tr) => el("option", { value: tr.tier, text: tr.tier === "free" ? t("free") : money(tr.stake_cents) })));
  if (prev && tierOf(k, prev)) $("tier-select").value = prev;
  for (const c of $("kind-cards").querySelectorAll(".kind-card")) c.setAttribute("aria-pressed", String(c.dataset.kind === k.kind));
  remembered.save(k.kind, $("tier-select").value);
  joinSummary();
}

function joinSummary() {
  const k = kindInfo(selectedKind);
  if (!k) return;
  const tr = tierOf(k, $("tier-select").value);
  const pot = tr && tr.tier !== "free" ? ` · ${t("pot")} ${money(tr.stake_cents * k.seat_count)}` : "";
  $("join-summary").textContent = `${k.title} · ${tr ? (tr.tier === "free" ? t("free") : money(tr.stake_cents)) : ""}${pot}`;
}

async function loadLobby() {
  const w = await get("/api/me/wallet");
  $("lobby-balance").textContent = money(w.balance);
  if (!kinds.length) kinds = (await get("/api/lobby/kinds")).kinds;
  if (!selectedKind) {
    renderKindCards();
    selectKind(kindInfo(remembered.kind) ? remembered.kind : kinds[0]?.kind, remembered.tier);
  }
  const mine = await get("/api/lobby/mine");
  $("my-tables").replaceChildren(...(mine.length ? mine.map((tb) => el("li", { "data-kind": tb.kind },
    el("span", { class: "grow", text: `${kindTitle(tb.kind)} · ${stakeText(tb)} · ${statusText(tb.status)} · ${num(tb.seats.filter((x) => x.player || x.bot).length)}/${num(tb.seat_count)} ${t("seatsfilled")}` }),
    tb.invite_code ? el("code", { text: tb.invite_code }) : "",
    tb.match_id ? el("button", { type: "button", class: "primary", text: t("open"), "data-test": "open-table", onclick: () => openTable(tb.match_id, tb) })
      : el("button", { type: "button", text: t("leave"), onclick: () => guard(async () => { await post("/api/lobby/leave", { table_id: tb.table_id }); loadLobby(); }) }),
  )) : [emptyItem("nomytables")]));
  for (const tb of mine) if (tb.match_id) tableInfo[tb.match_id] = tb;
  await loadInvitations();
  const open = await get("/api/lobby/tables");
  openTables = open.tables;
  renderKindCards();
  $("open-tables").replaceChildren(...(openTables.length ? openTables.map((tb) => el("li", {},
    el("span", { class: "grow", text: `${kindTitle(tb.kind)} · ${tb.tier === "free" ? t("free") : money(Math.round(Number(tb.tier) * 100))} · ${num(tb.taken)}/${num(tb.seat_count)} ${t("seatsfilled")}` }))) : [emptyItem("noopentables")]));
  const over = new Set(["voided", "void", "finished", "settled"]);
  const started = mine.find((tb) => tb.match_id && !over.has(tb.status) && !finished.has(tb.match_id));
  if (started && $("screen-lobby").hidden === false && !table) openTable(started.match_id, started);
}
const tableInfo = {};
const finished = new Set();

// ---------------------------------------------------------------- invitations
async function inviteAction(inv, action) {
  await guard(async () => {
    const r = await post(`/api/invitations/${inv.invitation_id}/${action}`);
    // The item itself then says "you accepted" (the list is a live region), or the table
    // opens: a toast would say it again over the balance on a phone.
    if (action === "accept" && r.table?.match_id) openTable(r.table.match_id, r.table);
  });
  if ($("screen-table").hidden) guard(loadLobby);
}

async function loadInvitations() {
  renderInvitations(await get("/api/invitations"), { me: me?.id, kindTitle, act: inviteAction, empty: () => emptyItem("noinvites") });
}

// A join that names a partner answers with an invitation (nobody is seated until he accepts).
function joinedOrInvited(r) {
  if (r && r.invitation_id !== undefined) {
    flash(`${t("invitesent")} ${r.invitees.join(", ")}`);
    loadInvitations();
    return true;
  }
  return false;
}

let lobbyPoll = null;
function pollLobby() {
  clearInterval(lobbyPoll);
  lobbyPoll = setInterval(() => { if (me && !$("screen-lobby").hidden) guard(loadLobby); }, 2000);
}

function openTable(matchId, tb) {
  for (const s of document.querySelectorAll(".screen")) s.hidden = s.id !== "screen-table";
  location.hash = `table/${matchId}`;
  flash("");
  if (table) table.close();
  const info = tb || tableInfo[matchId] || {};
  table = new Table(matchId, me, () => { finished.add(matchId); }, {
    kind: info.kind, title: info.kind ? kindTitle(info.kind) : undefined, stakeCents: info.stake_cents, seatCount: info.seat_count,
    resolveKind, kindTitle, playAgain: (opts) => guard(() => playAgain(opts.kind, opts)),
    onRematch: (r) => guard(() => openRematch(r)),
  });
}

// Everyone accepted the rematch: its table (started once all were seated) opens here.
async function openRematch(r) {
  const tb = r.table || await get(`/api/lobby/tables/${encodeURIComponent(r.table_id)}`);
  if (tb.match_id) openTable(tb.match_id, tb);
  else show("lobby");
}

// The kind a match was played as, from its variant and options (a table opened from a link).
function resolveKind(st) {
  const k = kinds.find((x) => x.variant === st.variant && x.seat_count === st.seats.length
    && Object.entries(x.options).every(([key, v]) => st.options?.[key] === v));
  return k?.kind;
}

async function openFromLink(matchId) {
  if (!kinds.length) kinds = (await get("/api/lobby/kinds")).kinds;
  const mine = await get("/api/lobby/mine");
  openTable(matchId, mine.find((tb) => tb.match_id === matchId));
}

// The same game again: against the CPU at once; at a paid table the same stake, and the
// partner (if any) is invited again and must accept before anyone is seated.
async function playAgain(kind, { tier, partner, cpu }) {
  if (cpu) {
    const r = await post("/api/lobby/cpu", { kind, idempotency_key: idem() });
    if (r.match_id) { openTable(r.match_id, { kind, seat_count: kindInfo(kind)?.seat_count }); return; }
  } else {
    const body = { kind, tier, idempotency_key: idem() };
    if (partner) body.partner = partner;
    const r = await post("/api/lobby/quick-join", body);
    if (!joinedOrInvited(r)) flash(t("waiting"));
  }
  show("lobby");
}

// ---------------------------------------------------------------- wallet & history
function handNo(dealId) { return String(dealId).split("/").pop().replace(/\D/g, ""); }

// A match as players name it: its game and stake when this page knows them, and a short id.
function matchLabel(matchId, variant, pot = null) {
  const tb = tableInfo[matchId];
  // a statement line carries its pot (variant, seats, tier): the game's title from the kinds
  const kind = pot?.variant && kinds.find((k) => k.variant === pot.variant && (!pot.seats || k.seat_count === pot.seats));
  const what = tb ? `${kindTitle(tb.kind)} · ${stakeText(tb)}`
    : kind ? `${kind.title} · ${stakeText({ tier: pot.tier })}`
    : variant ? variant[0].toUpperCase() + variant.slice(1) : "";
  return `${what}${what ? " · " : ""}${t("match")} ${String(matchId || "").slice(2, 10)}`;
}

const LINE_KIND = { deposit: "st_deposit", withdrawal: "st_withdrawal", hold: "st_stake", settle: "st_payout", void: "st_release", release: "st_release", reversal: "st_refund" };

async function matchNames() {
  // The matches the player sat at, by match id and by table id (a stake is held at a table
  // before its match exists, so the hold names the table): from his hands and his tables.
  const names = {}, byTable = {};
  try {
    const h = await get("/api/history");
    for (const x of h.transcripts) {
      if (!x.match_id) continue;
      names[x.match_id] = names[x.match_id] || { variant: x.variant, played: true };
      if (x.table_id) byTable[x.table_id] = x.match_id;
    }
  } catch { /* the statement still reads without them */ }
  for (const [id, tb] of Object.entries(tableInfo)) {
    if (!id || id === "undefined") continue;
    names[id] = { ...(names[id] || {}), variant: names[id]?.variant };
    if (tb.table_id) byTable[tb.table_id] = id;
  }
  return { names, byTable };
}

async function loadWallet() {
  const w = await get("/api/me/wallet");
  $("wallet-balance").textContent = money(w.balance);
  $("wallet-balance").dataset.cents = String(w.balance);
  loadVerification($("wallet-verification"));
  const st = await get("/api/me/statement");
  if (!kinds.length) kinds = (await get("/api/lobby/kinds").catch(() => ({ kinds: [] }))).kinds;
  const { names, byTable } = await matchNames();
  const matchOf = (l) => l.match_id || byTable[l.reference] || null;
  const won = new Set(st.lines.filter((l) => l.kind === "settle" && l.amount > 0).map(matchOf));
  const lines = st.lines.slice().reverse().slice(0, 200);
  guard(loadRandomOnly);
  $("statement").replaceChildren(...(lines.length ? lines.map((l) => {
    const what = t(LINE_KIND[l.kind] || "st_other");
    const mid = matchOf(l);
    const m = mid ? names[mid] : null;
    // The stake line carries the result: won (a payout came) or lost (the match was played).
    const result = !mid || l.kind !== "hold" ? "" : won.has(mid) ? t("won") : m?.played ? t("lost") : "";
    const detail = mid ? `${matchLabel(mid, m?.variant || l.variant, l)}${result ? ` · ${result}` : ""}` : l.reference || "";
    return el("tr", { "data-kind": l.kind },
      el("td", { text: dateTime(l.created_at) }),
      el("td", {}, what, el("span", { class: "sub", text: detail })),
      el("td", { class: `num ${l.amount >= 0 ? "pos" : "neg"}`, text: `${l.amount > 0 ? "+" : ""}${money(l.amount)}` }),
      el("td", { class: "num", text: money(l.balance) }));
  }) : [el("tr", {}, el("td", { colSpan: 4, text: t("nostatement") }))]));
  await loadLimits((e) => flash(reasonText(e), true));
}

// The pinned first key; later keys are trusted only through the log's rotation records.
const trustedKeys = () => pinnedFirstKey();

async function verifyInto(panel, dealId) {
  panel.replaceChildren(el("p", { role: "status", text: `${t("verify")} ${dealId}: ${t("pending")}` }));
  panel.scrollIntoView({ block: "nearest" });
  const doc = await get(`/api/transcripts/${dealId}`);
  const keys = await trustedKeys();
  const checks = await verifyTranscript(doc, keys);
  const ok = checks.every((c) => c.status === "pass");
  panel.replaceChildren(
    el("p", { class: `verdict ${ok ? "ok" : "bad"}`, role: "status", "data-test": "verify-result", "data-ok": String(ok), text: `${ok ? "✔ " + t("verify_ok") : "✘ " + t("verify_bad")}` }),
    el("p", { class: "sub", text: `${t("dealid")} ${dealId}` }),
    el("ul", { class: "checks" }, ...checks.map((c) => el("li", { class: c.status, "data-check": c.name, text: `${c.status === "pass" ? "✔" : "✘"} ${has("chk_" + c.name) ? t("chk_" + c.name) : c.name}: ${c.status === "pass" ? t("check_ok") : t("check_fail")}${c.detail ? ` · ${c.detail}` : ""}` }))),
  );
}

// A finished hand step by step (replay.js), in the panel where verdicts are shown.
function replayButton(panel, hand) {
  return el("button", { type: "button", text: t("rp_replay"), "data-test": "replay-hand",
    onclick: () => guard(async () => openReplay(panel, await get(`/api/transcripts/${hand.deal_id}`), { me: me?.role === "player" ? me.id : null, onClose: () => panel.replaceChildren() })) });
}

async function loadHistory() {
  const h = await get("/api/history");
  $("history-list").replaceChildren(...(h.transcripts.length ? h.transcripts.map((x) => el("li", {},
    el("span", { class: "grow", text: `${matchLabel(x.match_id, x.variant)} · ${t("dealid")} ${handNo(x.deal_id)}` }),
    el("button", { type: "button", text: t("verify"), "data-test": "verify-hand", onclick: () => guard(() => verifyInto($("verify-panel"), x.deal_id)) }),
    replayButton($("verify-panel"), x),
    x.match_id ? el("button", { type: "button", text: t("rep_short"), "data-test": "report-hand", onclick: () => guard(() => openReport(x.match_id, me?.id)) }) : "")) : [emptyItem("nohistory")]));
}

// ---------------------------------------------------------------- audit
function facts(box, pairs) {
  box.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, el("code", { class: "hash", text: String(v ?? "—") }))]));
}

async function loadAudit() {
  const keys = await get("/api/audit/keys");
  facts($("audit-keys"), keys.keys.flatMap((k) => [[t("keyid"), k.key_id], [t("keys"), k.public_key]]));
  try {
    const c = (await get("/api/audit/checkpoint")).record || {};
    facts($("audit-checkpoint"), [[t("treesize"), num(c.tree_size)], [t("roothash"), c.root_hash], [t("signedat"), dateTime(c.time)], [t("keyid"), c.key_id]]);
  } catch (e) { $("audit-checkpoint").replaceChildren(el("dd", { class: "error-text", text: reasonText(e) })); }
  const orphans = (await get("/api/audit/orphans")).orphans;
  $("audit-orphans").replaceChildren(orphans.length
    ? el("div", {}, el("p", { class: "verdict bad", text: `✘ ${t("orphans_some")}: ${num(orphans.length)}` }), el("ul", {}, ...orphans.slice(0, 50).map((o) => el("li", { text: typeof o === "string" ? o : (o.deal_id || Object.values(o).join(" · ")) }))))
    : el("p", { class: "verdict ok", text: `✔ ${t("orphans_none")}` }));
  const list = await get("/api/audit/transcripts?limit=50");
  $("audit-list").replaceChildren(...(list.transcripts.length ? list.transcripts.map((x) => el("li", {},
    el("span", { class: "grow", text: `${matchLabel(x.match_id, x.variant)} · ${t("dealid")} ${handNo(x.deal_id)} · ${t("players")}: ${x.players.map((p, i) => p || `${t("cpuplayer")} ${i + 1}`).join(", ")}` }),
    el("button", { type: "button", text: t("verify"), "data-test": "audit-verify-hand", onclick: () => guard(() => verifyInto($("audit-verify-panel"), x.deal_id)) }),
    replayButton($("audit-verify-panel"), x))) : [emptyItem("nohistory")]));
}

// ---------------------------------------------------------------- admin
async function loadAdmin() {
  const users = await get("/api/admin/users");
  $("admin-users").replaceChildren(...users.map((u) => el("li", {},
    el("span", { class: "grow", text: `${u.id} · ${t("role_" + u.role)} · ${statusText(u.status)}` }),
    el("button", { type: "button", text: u.status === "locked" ? t("unlock") : t("lock"), onclick: () => guard(async () => { const reason = (prompt(t("reasonprompt")) || "").trim(); if (!reason) return; await api("PATCH", `/api/admin/users/${u.id}`, { status: u.status === "locked" ? "active" : "locked", reason }); loadAdmin(); }) }))));
}

// ---------------------------------------------------------------- wiring
function wire() {
  $("lang").onclick = () => {
    setLang(getLang() === "es" ? "en" : "es");
    if (table) { table.chatButtons(); if (table.view) table.render(); return; }
    const name = location.hash.slice(1);
    if (selectedKind) selectKind(selectedKind); // the stake list and summary in the new language
    if (me && (SCREENS[me.role] || []).includes(name)) show(name);
  };
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
  $("tier-select").onchange = () => { remembered.save(selectedKind, $("tier-select").value); joinSummary(); };
  $("join-form").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = { kind: f.get("kind"), tier: f.get("tier"), idempotency_key: idem() };
    if (f.get("partner")) body.partner = String(f.get("partner")).toLowerCase();
    remembered.save(body.kind, body.tier);
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
    guard(async () => { const r = await post("/api/lobby/cpu", { kind: f.get("kind"), idempotency_key: idem() }); if (r.match_id) openTable(r.match_id, { kind: f.get("kind"), seat_count: kindInfo(f.get("kind"))?.seat_count }); else loadLobby(); });
  };
  $("code-form").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = { invite_code: String(f.get("code")).toUpperCase(), idempotency_key: idem() };
    if (f.get("partner")) body.partner = String(f.get("partner")).toLowerCase();
    guard(async () => { const r = await post("/api/lobby/join-code", body); joinedOrInvited(r); loadLobby(); });
  };
  $("back-lobby").onclick = () => show("lobby");
  $("report-btn").onclick = () => { if (table) guard(() => openReport(table.matchId, me?.id)); };
  $("self-exclude").onclick = () => guard(async () => { const u = await post("/api/me/self-exclusion", { days: 30 }); flash(`${t("selfexcluded")} ${dateTime(u.excluded_until)}`); });
  $("audit-refresh").onclick = () => guard(loadAudit);
  $("audit-verify").onclick = () => guard(() => verifyInto($("audit-verify-panel"), $("audit-deal").value.trim()));
  $("cons-check").onclick = () => guard(checkConsistency);
  $("fin-refresh").onclick = () => guard(loadFinance);
  initCompliance();
  $("fin-chain").onclick = () => guard(checkChain);
  $("fin-statement-form").onsubmit = (ev) => {
    ev.preventDefault();
    $("fin-statement-error").textContent = "";
    showStatement(new FormData(ev.target).get("player")).catch((e) => { $("fin-statement-error").textContent = reasonText(e); });
  };
  $("cashier-form").onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const op = ev.submitter?.value === "withdraw" ? "withdrawals" : "deposits";
    const cents = Math.round(Number(f.get("amount")) * 100);
    $("cashier-result").className = "";
    (async () => {
      const r = await post(`/api/finance/${op}`, { player: String(f.get("player")).toLowerCase(), amount: cents, reference: f.get("reference"), idempotency_key: idem() });
      $("cashier-result").textContent = `✔ ${op === "deposits" ? t("deposited") : t("withdrawn")}: ${money(Math.abs(r.amount))} · ${r.player} · ${t("balance")} ${money(r.balance)}`;
      loadFinance();
    })().catch((e) => { $("cashier-result").className = "error-text"; $("cashier-result").textContent = `✘ ${cashierRefusal(e) ?? reasonText(e)}`; });
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
  if ("serviceWorker" in navigator) navigator.serviceWorker.register("/sw.js").catch(() => { /* the page works without it */ });
  pollLobby();
  try { signedIn(await get("/api/me")); } catch { showLogin(); }
}
main();
