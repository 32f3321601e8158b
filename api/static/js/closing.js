// Finance screen, "Close the day": pick a day, see its draft report, propose closing it; a
// second finance user approves or withdraws a pending proposal; closed days with downloads.
// The ledger enforces the rules (four eyes, days in order); this page only shows them.
import { get, post, el, ApiError } from "./api.js";
import { t, has, money, num, dateTime } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const REPORT_FORMATS = [["json", "close_json"], ["csv", "close_csv"], ["xlsx", "close_xlsx"], ["html", "close_print"]];

function say(text, bad = false) {
  const box = $("close-msg");
  box.textContent = text;
  box.className = bad ? "flash bad" : "flash";
}

function refusal(e) {
  if (e instanceof ApiError) return has(`err_${e.code}`) ? t(`err_${e.code}`) : String(e.detail || e.code);
  return t("err_generic");
}

async function attempt(fn) {
  try { return await fn(); }
  catch (e) { say(refusal(e), true); return undefined; }
}

function table(caption, headers, rows) {
  const body = el("tbody");
  for (const row of rows) {
    body.append(el("tr", {}, ...row.map((cell) => (cell instanceof Node ? el("td", {}, cell) : el("td", { class: typeof cell === "object" && cell ? cell.cls : "", text: typeof cell === "object" && cell ? cell.text : String(cell ?? "") })))));
  }
  const region = el("div", { class: "scroll-x", tabIndex: 0 },
    el("table", { class: "grid" }, el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col", text: h })))), body));
  region.setAttribute("role", "region");
  region.setAttribute("aria-label", caption);
  return region;
}

const cents = (v, currency) => ({ cls: "num", text: money(v, currency || "USD") });
const kindName = (kind) => (has(`st_${kind}`) ? t(`st_${kind}`) : kind);
const lineName = (line) => (has(`cl_${line}`) ? t(`cl_${line}`) : line);

export function renderReport(report) {
  const ok = !!report.reconciliation?.ok;
  return el("div", { class: "close-report", "data-test": "close-report" },
    el("p", { class: `verdict ${ok ? "ok" : "bad"}`, "data-test": "close-recon", "data-ok": String(ok), text: ok ? `✔ ${t("close_recon_ok")}` : `✘ ${t("close_recon_bad")}` }),
    table(t("close_balances"), [t("account"), t("currency"), t("opening"), t("close_movement"), t("closing")],
      report.balances.map((b) => [kindName(b.kind), b.currency, cents(b.opening, b.currency), cents(b.movement, b.currency), cents(b.closing, b.currency)])),
    table(t("close_activity"), [t("close_line"), t("currency"), t("close_count"), t("close_amount")],
      report.activity.map((a) => [lineName(a.line), a.currency, { cls: "num", text: String(a.count) }, cents(a.amount, a.currency)])),
    table(t("commission"), [t("close_tier"), t("variant"), t("currency"), t("close_matches"), t("pot"), t("commission")],
      report.commission.map((c) => [c.tier, c.variant, c.currency, { cls: "num", text: String(c.matches) }, cents(c.pot_total, c.currency), cents(c.commission, c.currency)])),
    el("p", {}, el("span", { text: `${t("close_chain_head")}: ` }), el("code", { class: "hash", text: report.chain_head.chain_hash })),
    alertsBox(report.integrity_alerts),
  );
}

// The day's integrity alerts as the report carries them (the gateway read them at the close).
function alertsBox(integrity) {
  if (!integrity) return "";
  const kindOf = (kind) => (has(`kind_${kind}`) ? t(`kind_${kind}`) : kind);
  const box = el("div", { "data-test": "close-alerts" },
    el("h5", { text: t("close_alerts") }),
    el("p", { text: t("close_alerts_why") }));
  if (!integrity.by_kind.length) {
    box.append(el("p", { "data-test": "close-alerts-none", text: t("close_alerts_none") }));
    return box;
  }
  box.append(
    table(t("close_alerts_total"), [t("close_alert_kind"), t("close_count")],
      integrity.by_kind.map((k) => [kindOf(k.kind), { cls: "num", text: num(k.count) }])),
    table(t("close_alerts_list"), [t("close_alert_id"), t("close_alert_kind"), t("close_alert_player"), t("close_alert_counterpart"), t("close_alert_score"), t("close_alert_raised")],
      integrity.alerts.map((a) => [{ cls: "num", text: String(a.id) }, kindOf(a.kind), a.player, a.counterpart || "", { cls: "num", text: a.score }, dateTime(a.raised_at)])));
  if (integrity.truncated) box.append(el("p", { text: `${num(integrity.truncated)} ${t("close_alerts_more")}` }));
  return box;
}

function reasonOf() {
  const input = $("close-reason");
  const reason = input.value.trim();
  if (!reason) { input.focus(); say(t("close_need_reason"), true); return null; }
  return reason;
}

async function act(day, verb, me) {
  const reason = reasonOf();
  if (reason === null) return;
  const done = await attempt(() => post(`/api/finance/closes/${day}/${verb}`, { reason }));
  if (done) {
    say(t(`close_done_${verb}`));
    $("close-reason").value = "";
    await loadClosing(me);
  }
}

function pendingBox(pending, me) {
  if (!pending.length) return el("p", { text: t("close_none_pending") });
  return el("div", {}, ...pending.map((p) => {
    const mine = me && p.proposed_by === me.id;
    return el("div", { class: "card", "data-test": "close-pending" },
      el("p", { text: `${p.day} · ${t("close_proposed_by")} ${p.proposed_by} · ${dateTime(p.proposed_at)}` }),
      mine ? el("p", { text: t("close_own") }) : "",
      el("div", { class: "row" },
        el("button", { type: "button", "data-test": "close-approve", disabled: !!mine, text: t("close_approve"), onclick: () => act(p.day, "approve", me) }),
        el("button", { type: "button", "data-test": "close-withdraw", text: t("close_withdraw"), onclick: () => act(p.day, "withdraw", me) }),
        el("button", { type: "button", text: t("close_see"), onclick: () => showDraft(p.day) }),
      ));
  }));
}

function closedBox(closed) {
  if (!closed.length) return el("p", { text: t("close_none_closed") });
  return table(t("close_closed_days"), [t("close_day"), t("close_proposed_by"), t("close_approved_by"), t("close_downloads")],
    closed.map((c) => [c.day, c.proposed_by, c.approved_by,
      el("span", { class: "row" }, ...REPORT_FORMATS.map(([fmt, label]) => el("a", {
        class: "btn-link", href: `/api/finance/closes/${c.day}/report?format=${fmt}`,
        ...(fmt === "html" ? { target: "_blank", rel: "noopener" } : { download: `mesa-close-${c.day}.${fmt}` }),
        text: t(label) })))]));
}

async function showDraft(day) {
  const report = await attempt(() => get(`/api/finance/closes/${day}/draft`));
  if (report) $("close-draft").replaceChildren(el("h4", { text: `${t("close_draft_of")} ${day}` }), renderReport(report));
}

export async function loadClosing(me) {
  const box = $("fin-close");
  if (!box) return;
  const [list, key] = await Promise.all([get("/api/finance/closes"), attempt(() => get("/api/finance/closes/key"))]);
  const pending = list.closes.filter((c) => c.status === "proposed");
  const closed = list.closes.filter((c) => c.status === "closed");
  const dayInput = el("input", { id: "close-day", name: "day", type: "date", required: true, value: list.next_day || "" });
  const form = el("form", { id: "close-form", class: "row", onsubmit: (e) => { e.preventDefault(); showDraft(dayInput.value); } },
    el("label", {}, el("span", { text: t("close_day") }), " ", dayInput),
    el("label", {}, el("span", { text: t("close_reason") }), " ", el("input", { id: "close-reason", maxLength: 1000, autocomplete: "off" })),
    el("button", { type: "submit", "data-test": "close-show", text: t("close_see") }),
    el("button", { type: "button", "data-test": "close-propose", text: t("close_propose"), onclick: () => act(dayInput.value, "propose", me) }),
  );
  const status = el("p", { id: "close-msg" });
  status.setAttribute("role", "status");
  box.replaceChildren(
    el("p", { text: list.next_day ? `${t("close_next")}: ${list.next_day}` : t("close_nothing") }),
    status,
    form,
    el("h4", { text: t("close_pending") }),
    pendingBox(pending, me),
    el("div", { id: "close-draft" }),
    closedBox(closed),
    key ? el("details", {}, el("summary", { text: t("close_key") }),
      el("p", { text: t("close_key_help") }), el("code", { class: "hash", "data-test": "close-key", text: key.public_key })) : "",
  );
}
