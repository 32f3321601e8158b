// Finance screen: the verdicts first (trial balance, hash chain), then cashier, commission
// charts (inline SVG), pots and statements, all with human labels.
import { get, el } from "./api.js";
import { t, has, money, num, dateTime } from "./i18n.js";
import { loadRefunds, correctionForm } from "./refunds.js";

const NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

export function barChart(rows, label, value, title) {
  const W = 520, H = 200, pad = 30;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "bar-chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${title}: ${rows.map((r) => `${label(r)} ${money(value(r))}`).join(", ")}`);
  const max = Math.max(1, ...rows.map(value));
  const bw = rows.length ? Math.min(60, (W - 2 * pad) / rows.length - 8) : 0;
  rows.forEach((r, i) => {
    const v = value(r);
    const h = Math.round(((H - 2 * pad) * v) / max);
    const x = pad + i * (bw + 8);
    const rect = document.createElementNS(NS, "rect");
    rect.setAttribute("x", String(x)); rect.setAttribute("y", String(H - pad - h));
    rect.setAttribute("width", String(bw)); rect.setAttribute("height", String(h));
    rect.setAttribute("class", "bar");
    const tip = document.createElementNS(NS, "title");
    tip.textContent = `${label(r)}: ${money(v)}`;
    rect.append(tip);
    svg.append(rect);
    for (const [text, y, cls] of [[label(r), H - pad + 14, "axis"], [money(v), H - pad - h - 4, "val"]]) {
      const tx = document.createElementNS(NS, "text");
      tx.setAttribute("x", String(x + bw / 2)); tx.setAttribute("y", String(y));
      tx.setAttribute("class", cls); tx.setAttribute("text-anchor", "middle");
      tx.textContent = text;
      svg.append(tx);
    }
  });
  const axis = document.createElementNS(NS, "line");
  axis.setAttribute("x1", String(pad)); axis.setAttribute("x2", String(W - pad));
  axis.setAttribute("y1", String(H - pad)); axis.setAttribute("y2", String(H - pad));
  axis.setAttribute("class", "axis-line");
  svg.append(axis);
  return svg;
}

const MONEY_COLS = new Set(["balance", "amount", "stake_total", "commission", "pot_total", "total"]);

// columns: [[key, label], ...]; money columns right-aligned and formatted.
export function grid(rows, columns) {
  const table = el("table", { class: "grid" });
  table.append(el("thead", {}, el("tr", {}, ...columns.map(([c, label]) => el("th", { scope: "col", class: MONEY_COLS.has(c) ? "num" : "", text: label })))));
  const body = el("tbody");
  for (const r of rows.slice(0, 500)) {
    body.append(el("tr", {}, ...columns.map(([c]) => {
      const v = r[c];
      if (typeof v === "number" && MONEY_COLS.has(c)) return el("td", { class: "num", text: money(v, r.currency || "USD") });
      if (typeof v === "boolean") return el("td", { text: v ? `✔ ${t("ok")}` : `✘ ${t("failed")}` });
      if (c === "created_at" && v) return el("td", { text: dateTime(v) });
      if (c === "match_id" && v) return el("td", {}, el("code", { text: String(v).slice(0, 8), title: String(v) }));
      if (c === "tier" && v) return el("td", { class: "num", text: v === "free" ? t("free") : money(Math.round(Number(v) * 100)) });
      if (c === "status" || c === "kind") return el("td", { text: has(`${c === "kind" ? "st" : "status"}_${v}`) ? t(`${c === "kind" ? "st" : "status"}_${v}`) : String(v ?? "") });
      if (c === "variant" && v) return el("td", { text: String(v)[0].toUpperCase() + String(v).slice(1) });
      return el("td", { text: v === null || v === undefined ? "" : String(v) });
    })));
  }
  table.append(body);
  return table;
}

export async function loadFinance() {
  const tb = await get("/api/finance/trial-balance");
  $("fin-tb").replaceChildren(
    el("p", { class: `verdict ${tb.balanced ? "ok" : "bad"}`, "data-test": "tb-balanced", "data-ok": String(!!tb.balanced),
      text: `${tb.balanced ? "✔ " + t("tb_ok") : "✘ " + t("tb_bad")}` }),
    el("p", { text: tb.totals.map((x) => `${t("total")} ${x.currency}: ${money(x.total, x.currency)}`).join(" · ") }),
    el("details", {}, el("summary", { text: t("trialbalance") }),
      el("div", { class: "scroll-x" }, grid(tb.by_kind || [], [["kind", t("account")], ["currency", t("currency")], ["balance", t("balance")]]))),
  );
  await loadRefunds();
  const pots = await get("/api/finance/pots");
  $("fin-pots").replaceChildren(grid(pots, [["match_id", t("match")], ["tier", t("stake")], ["variant", t("variant")], ["status", t("status")], ["stake_total", t("pot")], ["commission", t("commission")], ["ok", t("ok")]]));
  const byDay = await get("/api/finance/commission?by=day");
  $("fin-chart-day").replaceChildren(barChart(byDay, (r) => String(r.day).slice(5), (r) => r.commission || 0, t("commissionday")));
  const byTier = await get("/api/finance/commission?by=tier");
  $("fin-chart-tier").replaceChildren(barChart(byTier, (r) => money(Math.round(Number(r.tier) * 100)), (r) => r.commission || 0, t("commissiontier")));
}

export async function checkChain() {
  const r = await get("/api/finance/chain");
  const ok = !!(r.ok ?? r.valid ?? r.intact);
  const n = r.entries ?? r.checked ?? r.count;
  $("fin-chain-result").replaceChildren(el("p", { class: `verdict ${ok ? "ok" : "bad"}`, text: `${ok ? "✔ " + t("chain_ok") : "✘ " + t("chain_bad")}${n !== undefined ? ` (${num(n)})` : ""}` }));
  $("fin-chain-result").dataset.ok = String(ok);
}

export async function showStatement(player) {
  const st = await get(`/api/finance/statements/${encodeURIComponent(player)}`);
  $("csv-statement").href = `/api/finance/export/statement?player=${encodeURIComponent(player)}`;
  $("csv-statement").hidden = false;
  $("fin-statement").replaceChildren(
    el("p", { text: `${player}: ${t("opening")} ${money(st.opening_balance)} → ${t("closing")} ${money(st.closing_balance)}` }),
    grid(st.lines, [["created_at", t("date")], ["kind", t("what")], ["match_id", t("match")], ["reference", t("reference")], ["amount", t("amount")], ["balance", t("balance")], ["entry_id", t("sp_entry")]]),
  );
  correctionForm(st);
}

// A deposit refused at the player's limit, in the reader's words: the allowance left comes
// from the answer's `refs` (the detail is the server's English), written by `money()`.
export function cashierRefusal(e) {
  const refs = e?.body?.refs;
  const left = Number(refs?.left_cents?.[0]);
  const window = { day: t("fin_window_day"), week: t("fin_window_week"), month: t("fin_window_month") }[refs?.window?.[0]];
  if (e?.code !== "deposit_limit" || !Number.isSafeInteger(left) || !window) return null;
  return t("fin_deposit_limit").replace("{window}", window).replace("{left}", money(left, refs.currency?.[0] || "USD"));
}
