// Finance screen: trial balance, pots, commission charts (inline SVG), statements, chain check.
import { get, el, money } from "./api.js";
import { t } from "./i18n.js";

const NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

export function barChart(rows, label, value) {
  const W = 520, H = 200, pad = 30;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "bar-chart");
  svg.setAttribute("role", "img");
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
    const title = document.createElementNS(NS, "title");
    title.textContent = `${label(r)}: ${money(v)}`;
    rect.append(title);
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

export function grid(rows, columns) {
  const table = el("table", { class: "grid" });
  table.append(el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { text: c })))));
  const body = el("tbody");
  for (const r of rows.slice(0, 500)) {
    body.append(el("tr", {}, ...columns.map((c) => {
      const v = r[c];
      const money_cols = ["balance", "amount", "stake_total", "commission", "pot_total", "total"];
      return el("td", { text: typeof v === "number" && money_cols.includes(c) ? money(v) : v === null || v === undefined ? "" : String(v) });
    })));
  }
  table.append(body);
  return table;
}

export async function loadFinance() {
  const tb = await get("/api/finance/trial-balance");
  $("fin-tb").replaceChildren(
    el("p", { "data-test": "tb-balanced", text: `balanced: ${tb.balanced} · ${tb.totals.map((x) => `${x.currency} ${money(x.total)}`).join(", ")}` }),
    grid(tb.by_kind || [], ["kind", "currency", "balance"]),
  );
  const pots = await get("/api/finance/pots");
  $("fin-pots").replaceChildren(grid(pots, ["match_id", "tier", "variant", "status", "stake_total", "commission", "ok"]));
  const byDay = await get("/api/finance/commission?by=day");
  $("fin-chart-day").replaceChildren(barChart(byDay, (r) => String(r.day).slice(5), (r) => r.commission || 0));
  const byTier = await get("/api/finance/commission?by=tier");
  $("fin-chart-tier").replaceChildren(barChart(byTier, (r) => `$${r.tier}`, (r) => r.commission || 0));
}

export async function checkChain() {
  const r = await get("/api/finance/chain");
  const ok = r.ok ?? r.valid ?? r.intact;
  $("fin-chain-result").textContent = `${ok ? "✔" : "✘"} ${JSON.stringify(r).slice(0, 200)}`;
  $("fin-chain-result").dataset.ok = String(!!ok);
}

export async function showStatement(player) {
  const st = await get(`/api/finance/statements/${encodeURIComponent(player)}`);
  $("csv-statement").href = `/api/finance/export/statement?player=${encodeURIComponent(player)}`;
  $("fin-statement").replaceChildren(
    el("p", { text: `${st.account}: ${money(st.opening_balance)} → ${money(st.closing_balance)}` }),
    grid(st.lines, ["created_at", "kind", "match_id", "reference", "amount", "balance"]),
  );
}
export { t };
