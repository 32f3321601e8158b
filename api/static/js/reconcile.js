// Reconciliation screen (finance): every check of `mesa finance reconcile` with ok/failed, each
// discrepancy's rows one tap away (match, entry); the drill-down from a commission line to its
// pots, a match's money and its hands; and the processor's settlement file, matched against
// the cashier's entries.
import { get, post, el, ApiError } from "./api.js";
import { t, has, money, num, dateTime } from "./i18n.js";
import { grid } from "./finance.js";

const $ = (id) => document.getElementById(id);
const MAX_FILE_BYTES = 1024 * 1024;

function label(prefix, key) {
  return has(`${prefix}${key}`) ? t(`${prefix}${key}`) : key;
}

function verdict(ok, okText, badText) {
  return el("p", { class: `verdict ${ok ? "ok" : "bad"}`, "data-ok": String(!!ok), text: `${ok ? "✔ " + okText : "✘ " + badText}` });
}

function refButtons(ref) {
  const out = [];
  if (ref.match_id) out.push(el("button", { type: "button", "data-test": "ref-match", text: `${t("match")} ${String(ref.match_id).slice(0, 12)}`, onclick: () => drill(() => showMatch(ref.match_id)) }));
  if (ref.entry_id) out.push(el("button", { type: "button", "data-test": "ref-entry", text: `${t("rec_entry")} ${ref.entry_id}`, onclick: () => drill(() => showEntry(ref.entry_id)) }));
  for (const k of ["account", "currency", "leg", "reversed_entry_id", "account_kind", "day"]) {
    if (ref[k] !== undefined && ref[k] !== null) out.push(el("code", { text: `${k}=${ref[k]}` }));
  }
  return out;
}

// A drill-down step replaces the panel below the lists and brings it into view.
async function drill(fn) {
  const panel = $("rec-drill");
  panel.replaceChildren(el("p", { text: t("rec_loading") }));
  try {
    await fn();
  } catch (e) {
    panel.replaceChildren(el("p", { role: "alert", text: e instanceof ApiError ? `${e.code}: ${e.detail}` : t("err_generic") }));
  }
  panel.scrollIntoView({ block: "start" });
}

export async function runReconcile() {
  const day = $("rec-form").elements.date.value;
  const report = await get(`/api/finance/reconcile${day ? `?date=${encodeURIComponent(day)}` : ""}`);
  $("rec-verdict").replaceChildren(
    verdict(report.ok, t("rec_all_ok"), `${t("rec_failed")}: ${num(report.discrepancies.length)}`),
    el("p", { text: report.date ? `${t("rec_scope_day")} ${report.date}` : t("rec_scope_all") }),
  );
  $("rec-verdict").dataset.ok = String(!!report.ok);
  $("rec-checks").replaceChildren(...report.checks.map((c) => {
    const li = el("li", { "data-test": `check-${c.check}`, "data-ok": String(!!c.ok) },
      el("span", { class: "grow", text: label("rc_", c.check) }),
      el("strong", { class: c.ok ? "pos" : "neg", text: c.ok ? `✔ ${t("ok")}` : `✘ ${t("failed")} (${num(c.discrepancies.length)})` }));
    if (!c.ok) {
      const items = el("ul", { class: "cards-list" });
      c.discrepancies.slice(0, 100).forEach((text, i) => {
        items.append(el("li", {}, el("span", { class: "grow", text }), ...refButtons((c.refs || [])[i] || {})));
      });
      li.append(el("details", { open: true }, el("summary", { text: t("rec_rows") }), items));
    }
    return li;
  }));
}

async function loadCommission() {
  const lines = await get("/api/finance/commission?by=day,tier,variant");
  const table = grid(lines.slice(-60).reverse(), [["day", t("date")], ["tier", t("stake")], ["variant", t("variant")], ["matches", t("rec_matches")], ["commission", t("commission")]]);
  // each line opens the pots behind it
  const rows = table.querySelectorAll("tbody tr");
  lines.slice(-60).reverse().forEach((line, i) => {
    rows[i].append(el("td", {}, el("button", { type: "button", "data-test": "commission-pots", text: t("pots"), onclick: () => drill(() => showPots(line)) })));
  });
  table.querySelector("thead tr").append(el("th", { scope: "col", text: t("rec_open") }));
  $("rec-commission").replaceChildren(table);
}

async function showPots(line) {
  const q = new URLSearchParams({ day: line.day, tier: line.tier, variant: line.variant, limit: "200" });
  const pots = await get(`/api/finance/pots?${q}`);
  const table = grid(pots, [["match_id", t("match")], ["stake_total", t("pot")], ["commission", t("commission")], ["ok", t("ok")]]);
  table.querySelectorAll("tbody tr").forEach((row, i) => {
    row.append(el("td", {}, el("button", { type: "button", "data-test": "pot-match", text: t("show"), onclick: () => drill(() => showMatch(pots[i].match_id)) })));
  });
  table.querySelector("thead tr").append(el("th", { scope: "col", text: t("rec_open") }));
  $("rec-drill").replaceChildren(
    el("h3", { text: `${t("pots")}: ${line.day} · ${line.tier} · ${line.variant} (${money(line.commission, line.currency)})` }),
    el("div", { class: "scroll-x", tabIndex: 0, role: "region", ariaLabel: t("pots") }, table),
  );
}

function postingsGrid(entry) {
  const rows = entry.postings.map((p) => ({ ...p, balance: p.balance_after }));
  return grid(rows, [["leg", "#"], ["account", t("account")], ["amount", t("amount")], ["balance", t("balance")]]);
}

function entryBlock(entry) {
  return el("div", { class: "rec-entry", "data-test": `entry-${entry.entry_id}` },
    el("p", {}, el("strong", { text: `${t("rec_entry")} ${entry.entry_id} · ${label("st_", entry.kind)}` }), ` · ${dateTime(entry.created_at)}`),
    el("div", { class: "scroll-x", tabIndex: 0, role: "region", ariaLabel: `${t("rec_entry")} ${entry.entry_id}` }, postingsGrid(entry)));
}

async function showEntry(entryId) {
  const entry = await get(`/api/finance/entries/${encodeURIComponent(entryId)}`);
  const parts = [el("h3", { text: `${t("rec_entry")} ${entry.entry_id}` }), entryBlock(entry)];
  if (entry.match_id) parts.push(el("button", { type: "button", text: `${t("match")} ${String(entry.match_id).slice(0, 12)}`, onclick: () => drill(() => showMatch(entry.match_id)) }));
  $("rec-drill").replaceChildren(...parts);
}

async function showMatch(matchId) {
  const m = await get(`/api/finance/matches/${encodeURIComponent(matchId)}`);
  const pot = m.pot;
  const hands = el("ul", { class: "cards-list", "data-test": "match-hands" });
  if (m.transcripts === null) hands.append(el("li", { class: "empty", text: t("rec_hands_unavailable") }));
  else if (!m.transcripts.length) hands.append(el("li", { class: "empty", text: t("rec_no_hands") }));
  for (const h of m.transcripts || []) {
    const slot = el("div", { class: "grow" });
    hands.append(el("li", {}, el("span", { class: "grow", text: `${t("hand_of")} ${h.deal_id}` }),
      el("button", { type: "button", "data-test": "hand-open", text: t("show"), onclick: () => showHand(h.deal_id, slot) }), slot));
  }
  $("rec-drill").replaceChildren(
    el("h3", { "data-test": "match-title", text: `${t("match")} ${m.match_id}` }),
    verdict(pot.ok, t("rec_pot_ok"), t("rec_pot_bad")),
    el("p", { text: `${label("status_", pot.status)} · ${t("pot")} ${money(pot.stake_total, pot.currency)} · ${t("commission")} ${pot.commission === null ? "—" : money(pot.commission, pot.currency)}` }),
    el("h4", { text: t("rec_stakes") }),
    el("div", { class: "scroll-x", tabIndex: 0, role: "region", ariaLabel: t("rec_stakes") }, grid(m.stakes, [["seat", "#"], ["player", t("player")], ["amount", t("amount")]])),
    el("h4", { text: t("rec_entries") }),
    ...m.entries.map(entryBlock),
    el("h4", { text: t("rec_hands") }),
    hands,
  );
}

async function showHand(dealId, slot) {
  try {
    const doc = await get(`/api/transcripts/${dealId.split("/").map(encodeURIComponent).join("/")}`);
    slot.replaceChildren(el("pre", { class: "scroll-x rec-transcript", tabIndex: 0, text: JSON.stringify(doc, null, 1).slice(0, 20000) }));
  } catch (e) {
    slot.replaceChildren(el("p", { role: "alert", text: e instanceof ApiError ? `${e.code}: ${e.detail}` : t("err_generic") }));
  }
}

// --------------------------------------------------------------------------- settlement file

function settlementResult(r) {
  // grid() formats amount, total and balance as money: the file's, ours and the difference
  const diffs = r.amount_differences.map((d) => ({ ...d, amount: d.file_amount, total: d.ledger_amount, balance: d.difference ?? 0, currency: d.file_currency }));
  const ours = r.unmatched_ledger;
  return [
    verdict(!r.amount_differences.length && !r.unmatched_file.length && !r.unmatched_ledger.length, t("rec_set_all_matched"), t("rec_set_exceptions")),
    el("p", { "data-test": "settlement-summary", text: `${r.filename} · ${num(r.lines)} ${t("rec_lines")} · ${r.first_day} – ${r.last_day} · ${t("rec_matched")}: ${num(r.matched)}${r.replayed ? ` · ${t("rec_replayed")}` : ""}` }),
    el("h4", { text: `${t("rec_differences")} (${num(diffs.length)})` }),
    el("div", { class: "scroll-x", tabIndex: 0, role: "region", ariaLabel: t("rec_differences") },
      grid(diffs, [["line", t("rec_line")], ["reference", t("reference")], ["amount", t("rec_file_amount")], ["total", t("rec_our_amount")], ["balance", t("rec_difference")], ["entry_id", t("rec_entry")]])),
    el("h4", { text: `${t("rec_unmatched_file")} (${num(r.unmatched_file.length)})` }),
    el("div", { class: "scroll-x", tabIndex: 0, role: "region", ariaLabel: t("rec_unmatched_file") },
      grid(r.unmatched_file, [["line", t("rec_line")], ["reference", t("reference")], ["amount", t("amount")], ["date", t("date")]])),
    el("h4", { text: `${t("rec_unmatched_ours")} (${num(ours.length)})` }),
    el("div", { class: "scroll-x", tabIndex: 0, role: "region", ariaLabel: t("rec_unmatched_ours") },
      grid(ours, [["entry_id", t("rec_entry")], ["created_at", t("date")], ["kind", t("what")], ["reference", t("reference")], ["amount", t("amount")]])),
  ];
}

async function loadSettlements() {
  const list = await get("/api/finance/settlements");
  $("rec-settle-list").replaceChildren(...(list.length ? list.map((s) => el("li", {},
    el("span", { class: "grow", text: `${s.filename} · ${dateTime(s.imported_at)} · ${num(s.lines)} ${t("rec_lines")} · ${t("rec_matched")} ${num(s.matched)} · ${t("rec_exceptions")} ${num(s.amount_differences + s.unmatched_file + s.unmatched_ledger)}` }),
    el("button", { type: "button", text: t("show"), onclick: async () => { $("rec-settle-result").replaceChildren(...settlementResult(await get(`/api/finance/settlements/${s.import_id}`))); } }),
  )) : [el("li", { class: "empty", text: t("rec_no_imports") })]));
}

async function importSettlement(ev) {
  ev.preventDefault();
  const form = ev.target;
  const out = $("rec-settle-result");
  const file = form.elements.file.files[0];
  if (!file) return;
  if (file.size > MAX_FILE_BYTES) {
    out.replaceChildren(el("p", { role: "alert", class: "verdict bad", text: t("rec_file_too_large") }));
    return;
  }
  try {
    const r = await post("/api/finance/settlements", { filename: file.name.slice(0, 200) || "settlement.csv", content: await file.text(), reason: form.elements.reason.value });
    out.replaceChildren(...settlementResult(r));
    await loadSettlements();
  } catch (e) {
    const errors = e instanceof ApiError && Array.isArray(e.body?.errors) ? e.body.errors : [];
    const list = el("ul", { class: "cards-list", "data-test": "settlement-errors" },
      ...errors.map((x) => el("li", {}, el("strong", { text: `${t("rec_line")} ${x.line}` }), el("span", { class: "grow", text: x.error }))));
    out.replaceChildren(
      el("p", { role: "alert", class: "verdict bad", text: errors.length ? t("rec_file_refused") : (e instanceof ApiError ? `${e.code}: ${e.detail}` : t("err_generic")) }),
      list,
    );
  }
}

let wired = false;
export async function loadReconcile() {
  if (!wired) {
    wired = true;
    $("rec-form").addEventListener("submit", (ev) => { ev.preventDefault(); drillOrFlash(runReconcile); });
    $("rec-settle-form").addEventListener("submit", importSettlement);
  }
  await runReconcile();
  await loadCommission();
  await loadSettlements();
}

async function drillOrFlash(fn) {
  try { await fn(); } catch (e) {
    $("rec-verdict").replaceChildren(el("p", { role: "alert", text: e instanceof ApiError ? `${e.code}: ${e.detail}` : t("err_generic") }));
  }
}
