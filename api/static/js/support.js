// Support screen: find a player; his account, sessions, finished hands (with the replay),
// statement, disputes with their notes, and refund proposals (a reversal that finance decides).
import { get, post, el, ApiError } from "./api.js";
import { t, has, money, dateTime } from "./i18n.js";
import { openReplay } from "./replay.js";

const $ = (id) => document.getElementById(id);
const REVERSIBLE = new Set(["deposit", "withdrawal"]);
let current = null;

function reason(e) {
  if (e instanceof ApiError) return has("err_" + e.code) ? t("err_" + e.code) : e.detail || t("err_generic");
  return t("err_generic");
}

// Runs fn; a refusal is shown in the screen's alert line (the screen stays as it was).
async function attempt(fn) {
  $("sp-error").textContent = "";
  try { return await fn(); } catch (e) { $("sp-error").textContent = `✘ ${reason(e)}`; return undefined; }
}

function field(name, key, attrs = {}) {
  return el("label", {}, el("span", { text: t(key) }), el("input", { name, autocomplete: "off", ...attrs }));
}

function form(test, onsubmit, ...children) {
  return el("form", { class: "row", "data-test": test, onsubmit: (ev) => { ev.preventDefault(); attempt(() => onsubmit(new FormData(ev.target), ev.target)); } }, ...children);
}

function statusText(s) { return has("status_" + s) ? t("status_" + s) : s; }

function alertLine() {
  const p = el("p", { id: "sp-error", class: "error-text" });
  p.setAttribute("role", "alert");
  return p;
}

function skeleton() {
  const root = $("support-root");
  if (root.childElementCount) return;
  root.append(
    form("sp-search", async (f) => search(String(f.get("q")).trim()),
      field("q", "sp_find", { required: true, maxLength: 40, type: "search" }),
      el("button", { type: "submit", class: "primary", text: t("sp_search") })),
    alertLine(),
    el("ul", { id: "sp-results", class: "cards-list", "data-test": "sp-results" }),
    el("div", { id: "sp-player", class: "sp-player" }));
}

async function search(q, after = "") {
  const page = await get(`/api/support/players?q=${encodeURIComponent(q)}&limit=20${after ? `&after=${encodeURIComponent(after)}` : ""}`);
  const items = page.players.map((p) => el("li", {},
    el("span", { class: "grow", text: `${p.display_name} (${p.id}) · ${statusText(p.status)}` }),
    el("button", { type: "button", text: t("open"), "data-test": "sp-open", onclick: () => attempt(() => showPlayer(p.id)) })));
  if (page.next) items.push(el("li", {}, el("button", { type: "button", text: t("sp_more"), onclick: () => attempt(() => search(q, page.next)) })));
  if (after) $("sp-results").append(...items);
  else $("sp-results").replaceChildren(...(items.length ? items : [el("li", { class: "empty", text: t("sp_none") })]));
}

function table(caption, head, rows) {
  const box = el("div", { class: "scroll-x", tabIndex: 0 },
    el("table", { class: "grid" }, el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, ...head.map(([key, cls]) => el("th", { scope: "col", class: cls || "", text: t(key) })))),
      el("tbody", {}, ...rows)));
  box.setAttribute("role", "region");
  box.setAttribute("aria-label", caption);
  return box;
}

export async function showPlayer(id) {
  const p = await get(`/api/support/players/${encodeURIComponent(id)}`);
  current = p;
  const facts = el("dl", { class: "facts", "data-test": "sp-facts" });
  const pairs = [["status", statusText(p.status)], ["sp_since", dateTime(p.created_at)], ["balance", money(p.wallet.balance, p.wallet.currency)]];
  if (p.excluded_until) pairs.push(["selfexcluded", dateTime(p.excluded_until)]);
  const cur = p.limits.currency || p.wallet.currency;
  for (const kind of ["deposit", "loss"]) {
    for (const span of ["day", "week", "month"]) {
      const lim = p.limits[`${kind}_${span}`];
      let text = lim.cents == null ? t("lim_none") : money(lim.cents, cur);
      if (lim.pending_at) text += ` · ${t("lim_pending")} ${lim.pending_cents == null ? t("lim_none") : money(lim.pending_cents, cur)} (${dateTime(lim.pending_at)})`;
      pairs.push([`${t("lim_" + kind)} · ${t("lim_" + span)}`, text]);
    }
  }
  pairs.push(["lim_reminder", p.limits.reminder_min ? `${p.limits.reminder_min} min` : t("lim_off")]);
  if (p.limits.cooling_off_until) pairs.push(["lim_cooling", dateTime(p.limits.cooling_off_until)]);
  facts.append(...pairs.flatMap(([k, v]) => [el("dt", { text: has(k) ? t(k) : k }), el("dd", { text: v })]));
  const sessions = table(t("sp_sessions"), [["sp_kind"], ["sp_label"], ["sp_created"], ["sp_expires"], ["status"]],
    p.sessions.map((s) => el("tr", {}, el("td", { text: s.kind }), el("td", { text: s.label || "—" }), el("td", { text: dateTime(s.created_at) }),
      el("td", { text: dateTime(s.expires_at) }), el("td", { text: s.live ? t("sp_live") : s.revoked_at ? `${t("sp_revoked")} ${dateTime(s.revoked_at)}` : t("sp_expired") }))));
  $("sp-player").replaceChildren(
    el("h3", { text: `${p.display_name} (${p.id})`, "data-test": "sp-name" }), facts,
    sessions,
    el("h3", { text: t("sp_hands") }), el("div", { id: "sp-replay", class: "verify-panel" }), el("ul", { id: "sp-hands", class: "cards-list", "data-test": "sp-hands" }),
    el("h3", { text: t("statements") }), el("div", { id: "sp-statement" }),
    el("h3", { text: t("sp_refunds") }), el("ul", { id: "sp-refunds", class: "cards-list" }), el("div", { id: "sp-propose" }),
    el("h3", { text: t("sp_disputes") }), el("div", { id: "sp-disputes" }));
  renderRefunds(p);
  renderDisputes(p);
  await Promise.all([loadHands(p.id), loadStatement(p.id)]);
}

async function loadHands(id) {
  const list = await get(`/api/support/players/${encodeURIComponent(id)}/matches`);
  $("sp-hands").replaceChildren(...(list.transcripts.length ? list.transcripts.map((x) => el("li", {},
    el("span", { class: "grow", text: `${x.variant} · ${t("match")} ${String(x.match_id || "").slice(2, 10)} · ${t("dealid")} ${String(x.deal_id).split("/").pop().replace(/\D/g, "")}` }),
    el("button", { type: "button", text: t("rp_replay"), "data-test": "sp-replay", onclick: () => attempt(async () => {
      const hand = await get(`/api/support/transcripts/${x.deal_id}`);
      openReplay($("sp-replay"), hand.transcript, { names: hand.players, onClose: () => $("sp-replay").replaceChildren() });
    }) }))) : [el("li", { class: "empty", text: t("nohistory") })]));
}

const LINE_KIND = { deposit: "st_deposit", withdrawal: "st_withdrawal", hold: "st_stake", settle: "st_payout", void: "st_release", release: "st_release", reversal: "st_refund" };

async function loadStatement(id) {
  const st = await get(`/api/support/players/${encodeURIComponent(id)}/statement`);
  const lines = st.lines.slice().reverse().slice(0, 200);
  const rows = lines.length ? lines : [null];
  $("sp-statement").replaceChildren(table(t("movements"), [["date"], ["what"], ["amount", "num"], ["balance", "num"], ["sp_entry", "num"]],
    rows.map((l) => (l === null ? el("tr", {}, el("td", { colSpan: 5, text: t("nostatement") })) : rowOf(l)))));
  function rowOf(l) {
    return el("tr", { "data-kind": l.kind },
      el("td", { text: dateTime(l.created_at) }),
      el("td", {}, t(LINE_KIND[l.kind] || "st_other"), el("span", { class: "sub", text: l.reference || l.match_id || "" })),
      el("td", { class: `num ${l.amount >= 0 ? "pos" : "neg"}`, text: money(l.amount, st.currency) }),
      el("td", { class: "num", text: money(l.balance, st.currency) }),
      el("td", { class: "num", text: String(l.entry_id) }));
  }
  const reversible = lines.filter((l) => REVERSIBLE.has(l.kind));
  const entry = el("select", { name: "entry_id", required: true },
    ...reversible.map((l) => el("option", { value: String(l.entry_id), text: `#${l.entry_id} · ${t(LINE_KIND[l.kind])} · ${money(l.amount, st.currency)} · ${dateTime(l.created_at)}` })));
  const dispute = el("select", { name: "dispute_id" }, el("option", { value: "", text: "—" }),
    ...current.disputes.filter((d) => d.status === "open").map((d) => el("option", { value: String(d.id), text: `#${d.id}` })));
  $("sp-propose").replaceChildren(reversible.length ? form("sp-propose", async (f, node) => {
    const body = { player: id, entry_id: Number(f.get("entry_id")), reason: String(f.get("reason")) };
    if (f.get("dispute_id")) body.dispute_id = Number(f.get("dispute_id"));
    await post("/api/support/refunds", body);
    node.reset();
    await showPlayer(id);
  }, el("label", {}, el("span", { text: t("sp_entry") }), entry),
    el("label", {}, el("span", { text: t("sp_dispute") }), dispute),
    field("reason", "sp_reason", { required: true, maxLength: 1000 }),
    el("button", { type: "submit", text: t("sp_propose") })) : el("p", { class: "sub", text: t("sp_nothing_reversible") }));
}

function renderRefunds(p) {
  $("sp-refunds").replaceChildren(...(p.refunds.length ? p.refunds.map((r) => el("li", { "data-status": r.status },
    el("span", { class: "grow", text: `#${r.id} · ${t("sp_entry")} ${r.entry_id} · ${money(-r.amount, r.currency)} · ${t("rf_" + r.status)} · ${r.reason}${r.decision_reason ? ` · ${r.decided_by}: ${r.decision_reason}` : ""}` }))) : [el("li", { class: "empty", text: t("sp_none") })]));
}

function renderDisputes(p) {
  const open = form("sp-open-dispute", async (f, node) => {
    const body = { player: p.id, reason: String(f.get("reason")) };
    const deal = String(f.get("deal_id") || "").trim();
    if (deal) { body.deal_id = deal; body.match_id = deal.split("/")[0]; }
    await post("/api/support/disputes", body);
    node.reset();
    await showPlayer(p.id);
  }, field("reason", "sp_complaint", { required: true, maxLength: 1000 }), field("deal_id", "sp_deal", { maxLength: 128 }),
  el("button", { type: "submit", text: t("sp_open_dispute") }));
  $("sp-disputes").replaceChildren(open, el("ul", { class: "cards-list", "data-test": "sp-dispute-list" }, ...p.disputes.map((d) => el("li", { class: "sp-dispute", "data-status": d.status },
    el("div", { class: "grow" },
      el("strong", { text: `#${d.id} · ${t("dp_" + d.status)}${d.deal_id ? ` · ${t("dealid")} ${d.deal_id}` : ""}` }),
      el("ol", { class: "sp-notes" }, ...d.notes.map((n) => el("li", { text: `${dateTime(n.created_at)} · ${n.author}: ${n.body}` }))),
      d.status === "closed" ? el("p", { class: "sub", text: `${t("sp_closed_by")} ${d.closed_by}: ${d.close_reason}` }) : ""),
    ...(d.status === "open" ? [
      form("sp-note", async (f) => { await post(`/api/support/disputes/${d.id}/notes`, { note: String(f.get("note")) }); await showPlayer(p.id); },
        field("note", "sp_note", { required: true, maxLength: 1000 }), el("button", { type: "submit", text: t("sp_add_note") })),
      form("sp-close", async (f) => { await post(`/api/support/disputes/${d.id}/close`, { reason: String(f.get("reason")) }); await showPlayer(p.id); },
        field("reason", "sp_outcome", { required: true, maxLength: 1000 }), el("button", { type: "submit", text: t("sp_close_dispute") })),
    ] : [])))));
}

export async function loadSupport() {
  skeleton();
  if (current) await attempt(() => showPlayer(current.id));
}

