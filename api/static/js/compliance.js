// Compliance screen: integrity alerts, one alert's evidence, and the officer's actions (hold
// withdrawals, freeze the account, close the alert), each with the reason the audit log keeps;
// players' reports (newest first, by reported player), also inside a player's alert.
import { get, post, el, ApiError } from "./api.js";
import { t, has, money, dateTime } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const KINDS = ["pair_flow", "repeated_losing", "chain", "little_play", "rapid_in_out", "structuring",
  "steady_timing", "around_clock", "shared_device", "shared_address", "deliberate_losing", "player_report"];
const CATEGORIES = ["collusion", "cheating", "abuse", "bot", "other"];
let before = null;
let reportsBefore = null;

const kindName = (k) => (has("kind_" + k) ? t("kind_" + k) : k);

function say(msg, bad = false) {
  const box = $("cmp-status");
  box.textContent = msg;
  box.className = bad ? "cmp-status bad" : "cmp-status";
}

function refusal(e) {
  if (e instanceof ApiError) return has("err_" + e.code) ? t("err_" + e.code) : e.detail || t("err_generic");
  return t("err_generic");
}

function fillKinds() {
  const select = $("cmp-kind");
  if (select.options.length > 1) return;
  for (const k of KINDS) select.append(el("option", { value: k, text: kindName(k) }));
}

export async function loadCompliance(more = false) {
  fillKinds();
  const f = new FormData($("cmp-filter"));
  const params = new URLSearchParams({ limit: "30" });
  for (const name of ["status", "kind", "player"]) {
    const v = String(f.get(name) || "").trim().toLowerCase();
    if (v) params.set(name, v);
  }
  if (more && before) params.set("before", String(before));
  const page = await get(`/api/compliance/alerts?${params}`);
  const list = $("cmp-alerts");
  if (!more) list.replaceChildren();
  for (const a of page.alerts) list.append(alertCard(a));
  if (!list.children.length) list.append(el("li", { class: "empty", text: t("cmp_none") }));
  before = page.next;
  $("cmp-more").hidden = !page.next;
  if (!more) await loadReports().catch((e) => say(refusal(e), true));
}

const categoryName = (c) => (CATEGORIES.includes(c) ? t("rep_cat_" + c) : c);

function reportItem(r) {
  const li = el("li", { "data-test": "cmp-report" },
    el("span", { class: "grow" },
      el("strong", { text: r.reported }), ` · ${categoryName(r.category)}`,
      el("span", { class: "sub", text: `${dateTime(r.created_at)} · ${t("cmp_reporter")}: ${r.reporter} · ${t("cmp_match")} ${String(r.match_id).slice(0, 12)}` })));
  if (r.text) li.querySelector(".grow").append(el("span", { class: "sub", text: r.text }));
  return li;
}

export async function loadReports(more = false) {
  const params = new URLSearchParams({ limit: "20" });
  const who = String(new FormData($("cmp-rep-filter")).get("reported") || "").trim().toLowerCase();
  if (who) params.set("reported", who);
  if (more && reportsBefore) params.set("before", String(reportsBefore));
  const page = await get(`/api/compliance/reports?${params}`);
  const list = $("cmp-reports");
  if (!more) list.replaceChildren();
  for (const r of page.reports) list.append(reportItem(r));
  if (!list.children.length) list.append(el("li", { class: "empty", text: t("cmp_reports_none") }));
  reportsBefore = page.next;
  $("cmp-reports-more").hidden = !page.next;
}

function alertCard(a) {
  const who = a.counterpart ? `${a.player} ← ${a.counterpart}` : a.player;
  return el("li", { "data-test": "cmp-alert" },
    el("span", { class: "grow" },
      el("strong", { text: kindName(a.kind) }), " · ", who,
      el("span", { class: "sub", text: `${dateTime(a.created_at)} · ${t("cmp_score")} ${a.score} · ${t(a.status === "open" ? "cmp_open" : "cmp_closed")}` })),
    el("button", { type: "button", text: t("show"), onclick: () => openAlert(a.id) }));
}

function figureValue(k, v, figures) {
  if (typeof v === "number" && k.endsWith("_cents")) return money(v, figures.currency || "USD");
  if (typeof v === "boolean") return t(v ? "cmp_private" : "cmp_public");
  if (v === null || v === undefined) return "—";
  return String(v);
}

function figureRows(figures) {
  return el("dl", { class: "facts" }, ...Object.entries(figures).flatMap(([k, v]) => {
    const label = has("fig_" + k) ? t("fig_" + k) : k.replaceAll("_", " ");
    return [el("dt", { text: label }), el("dd", { text: figureValue(k, v, figures) })];
  }));
}

function table(rows, columns) {
  const tbl = el("table", { class: "grid" });
  tbl.append(el("thead", {}, el("tr", {}, ...columns.map(([, label]) => el("th", { scope: "col", text: label })))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, ...columns.map(([key, , fmt]) => el("td", {}, fmt ? fmt(r[key], r) : String(r[key] ?? "")))));
  tbl.append(body);
  const region = el("div", { class: "scroll-x", tabIndex: 0 }, tbl);
  region.setAttribute("role", "region");
  region.setAttribute("aria-label", columns.map((c) => c[1]).join(", "));
  return region;
}

async function act(path, body) {
  try {
    await post(path, body);
    say(t("cmp_done"));
    return true;
  } catch (e) {
    say(refusal(e), true);
    return false;
  }
}

function reason() {
  const text = $("cmp-reason") ? $("cmp-reason").value.trim() : "";
  if (!text) { say(t("cmp_reason_needed"), true); $("cmp-reason")?.focus(); }
  return text;
}

async function openAlert(id) {
  let d;
  try { d = await get(`/api/compliance/alerts/${id}`); } catch (e) { say(refusal(e), true); return; }
  const a = d.alert;
  const box = $("cmp-detail");
  box.hidden = false;
  const players = el("ul", { class: "cards-list" }, ...d.players.map((p) => el("li", {},
    el("span", { class: "grow" }, el("strong", { text: p.player }),
      el("span", { class: "sub", text: `${t("cmp_account")}: ${p.status ? t("status_" + (p.status === "self_excluded" ? "excluded" : p.status)) : "—"} · ${t("cmp_withdrawals")}: ${t(p.withdrawals_held ? "cmp_held" : "cmp_not_held")}` })),
    el("button", { type: "button", text: t(p.withdrawals_held ? "cmp_release" : "cmp_hold"), "data-test": "cmp-hold",
      onclick: async () => { const r = reason(); if (r && await act(`/api/compliance/players/${p.player}/${p.withdrawals_held ? "release" : "hold"}`, { reason: r, alert_id: a.id })) openAlert(a.id); } }),
    el("button", { type: "button", text: t(p.status === "locked" ? "cmp_unfreeze" : "cmp_freeze"), "data-test": "cmp-freeze",
      onclick: async () => { const r = reason(); if (r && await act(`/api/compliance/players/${p.player}/${p.status === "locked" ? "unfreeze" : "freeze"}`, { reason: r, alert_id: a.id })) openAlert(a.id); } }))));
  const parts = [
    el("h3", { text: `${kindName(a.kind)} #${a.id}` }),
    el("p", { text: `${dateTime(a.created_at)} · ${t(a.status === "open" ? "cmp_open" : "cmp_closed")}${a.close_reason ? " · " + a.close_reason : ""}` }),
    el("h4", { text: t("cmp_figures") }), figureRows(a.figures),
    el("label", { class: "stack" }, el("span", { text: t("cmp_reason") }),
      el("textarea", { id: "cmp-reason", maxLength: 1000, rows: 2, required: true })),
    el("h4", { text: t("cmp_players") }), players,
  ];
  if (d.flows.length) parts.push(el("h4", { text: t("cmp_flows") }), table(d.flows, [
    ["from_player", t("cmp_from")], ["to_player", t("cmp_to")],
    ["detail", t("amount"), (v, r) => (typeof v.net_cents === "number" ? money(v.net_cents, r.currency) : "")],
  ]));
  if (d.matches.length) parts.push(el("h4", { text: t("cmp_matches") }), table(d.matches, [
    ["match_id", t("cmp_match"), (v) => el("code", { text: String(v).slice(0, 12), title: String(v) })],
    ["tier", t("cmp_tier"), (v) => (v && v !== "free" ? money(Math.round(Number(v) * 100)) : String(v ?? ""))],
    ["private", t("cmp_table"), (v) => (v === true ? t("cmp_private") : v === false ? t("cmp_public") : "—")],
    ["at", t("cmp_when"), (v) => (v ? dateTime(v) : "")],
    ["transcripts", t("cmp_transcripts"), (v) => el("a", { href: v, target: "_blank", rel: "noopener", text: t("cmp_hands") })],
  ]));
  const gifts = d.other.filter((o) => o.kind === "deal");
  if (gifts.length) parts.push(el("h4", { text: t("cmp_gifts") }), table(gifts, [
    ["ref", t("cmp_deal"), (v) => el("a", { href: "/api/transcripts/" + encodeURI(v), target: "_blank", rel: "noopener", text: String(v).slice(-16), title: String(v), "data-test": "cmp-gift" })],
    ["detail", t("cmp_tile"), (v) => String(v.tile ?? "")],
    ["detail", t("cmp_to_whom"), (v) => (v.counterpart ? String(v.counterpart) : t("cmp_cpu"))],
    ["detail", t("cmp_tier"), (v) => (typeof v.stake_cents === "number" ? money(v.stake_cents, v.currency || "USD") : "")],
    ["detail", t("cmp_table"), (v) => (v.private === true ? t("cmp_private") : t("cmp_public"))],
  ]));
  if (d.entries.length) parts.push(el("h4", { text: t("cmp_entries") }), table(d.entries, [
    ["kind", t("cmp_movement"), (v) => (v ? t(v === "deposit" ? "st_deposit" : "st_withdrawal") : "")],
    ["player", t("player")],
    ["amount", t("amount"), (v, r) => (typeof v === "number" ? money(v, r.currency || "USD") : "")],
    ["at", t("cmp_when"), (v) => (v ? dateTime(v) : "")],
  ]));
  if (a.status === "open") {
    const resolution = el("select", { name: "resolution" },
      el("option", { value: "dismissed", text: t("cmp_dismissed") }), el("option", { value: "actioned", text: t("cmp_actioned") }));
    parts.push(el("div", { class: "row" }, el("label", {}, el("span", { text: t("cmp_resolution") }), " ", resolution),
      el("button", { type: "button", "data-test": "cmp-close", text: t("cmp_close"),
        onclick: async () => { const r = reason(); if (r && await act(`/api/compliance/alerts/${a.id}/close`, { resolution: resolution.value, reason: r })) { openAlert(a.id); loadCompliance(); } } })));
  }
  let about = [];
  try { about = (await get(`/api/compliance/reports?${new URLSearchParams({ reported: a.player, limit: "20" })}`)).reports; } catch { about = []; }
  parts.push(el("h4", { text: t("cmp_reports_about") }), about.length
    ? el("ul", { class: "cards-list", "data-test": "cmp-player-reports" }, ...about.map(reportItem))
    : el("p", { class: "sub", text: t("cmp_reports_none") }));
  parts.push(el("button", { type: "button", text: t("cmp_back"), onclick: () => { box.hidden = true; $("cmp-alerts").scrollIntoView(); } }));
  box.replaceChildren(...parts);
  box.scrollIntoView();
}

export function initCompliance() {
  $("cmp-filter").addEventListener("submit", (ev) => { ev.preventDefault(); loadCompliance().catch((e) => say(refusal(e), true)); });
  $("cmp-more").addEventListener("click", () => loadCompliance(true).catch((e) => say(refusal(e), true)));
  $("cmp-rep-filter").addEventListener("submit", (ev) => { ev.preventDefault(); loadReports().catch((e) => say(refusal(e), true)); });
  $("cmp-reports-more").addEventListener("click", () => loadReports(true).catch((e) => say(refusal(e), true)));
}
