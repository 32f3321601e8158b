// Finance: corrections of cashier entries (refund proposals). A finance user proposes reversing
// a deposit or withdrawal from a player's statement; support's proposals land here too. Another
// finance user approves (the ledger reverses it once, however often it is clicked) or rejects:
// the proposer never decides his own, so his proposals show no buttons.
import { get, post, el, ApiError } from "./api.js";
import { t, has, money, dateTime } from "./i18n.js";

const KIND = { deposit: "st_deposit", withdrawal: "st_withdrawal" };

function section() {
  let box = document.getElementById("fin-refunds");
  if (box) return box;
  box = el("section", { id: "fin-refunds", "data-test": "fin-refunds" });
  const after = document.getElementById("fin-tb");
  after.after(box);
  return box;
}

function why(e) {
  return e instanceof ApiError && has("err_" + e.code) ? t("err_" + e.code) : e?.detail || t("err_generic");
}

function statusLine() {
  const p = el("p", { class: "sub" });
  p.setAttribute("role", "status");
  return p;
}

export async function loadRefunds() {
  const box = section();
  const [pending, me] = await Promise.all([get("/api/finance/refunds?status=proposed"), get("/api/me")]);
  const result = statusLine();
  const decide = (r, verdict, input) => async () => {
    if (!input.value.trim()) { input.focus(); input.reportValidity(); return; }
    try {
      await post(`/api/finance/refunds/${r.id}/${verdict}`, { reason: input.value.trim() });
      await loadRefunds();
      const again = document.querySelector("#fin-refunds [role=status]");
      if (again) again.textContent = `✔ #${r.id}: ${t(verdict === "approve" ? "rf_approved" : "rf_rejected")}`;
    } catch (e) { result.className = "error-text"; result.textContent = `✘ ${why(e)}`; }
  };
  box.replaceChildren(el("h3", { text: t("rf_title") }), result,
    el("ul", { class: "cards-list", "data-test": "fin-refund-list" }, ...(pending.length ? pending.map((r) => {
      const what = el("span", { class: "grow", text: `#${r.id} · ${r.player} · ${t(KIND[r.entry_kind] || "st_other")} #${r.entry_id} · ${t("rf_moves")} ${money(-r.amount, r.currency)} · ${r.proposed_by}, ${dateTime(r.proposed_at)} · ${r.reason}` });
      if (r.proposed_by === me.id) {
        return el("li", { "data-refund": String(r.id), "data-own": "true" }, what, el("span", { class: "sub", "data-test": "rf-own", text: t("co_own") }));
      }
      const input = el("input", { name: "reason", required: true, maxLength: 1000, autocomplete: "off" });
      return el("li", { "data-refund": String(r.id) }, what,
        el("label", {}, el("span", { text: t("sp_reason") }), input),
        el("button", { type: "button", class: "primary", "data-test": "rf-approve", text: t("rf_approve"), onclick: decide(r, "approve", input) }),
        el("button", { type: "button", "data-test": "rf-reject", text: t("rf_reject"), onclick: decide(r, "reject", input) }));
    }) : [el("li", { class: "empty", text: t("rf_none") })])));
}

// Below a player's statement: propose reversing one of its deposits or withdrawals.
export function correctionForm(st) {
  let box = document.getElementById("fin-correct");
  if (!box) {
    box = el("section", { id: "fin-correct", "data-test": "fin-correct" });
    document.getElementById("fin-statement").after(box);
  }
  const lines = st.lines.filter((l) => KIND[l.kind]).slice().reverse().slice(0, 200);
  if (!lines.length) {
    box.replaceChildren(el("h4", { text: t("co_title") }), el("p", { class: "sub", text: t("sp_nothing_reversible") }));
    return;
  }
  const result = statusLine();
  const entry = el("select", { name: "entry_id", required: true },
    ...lines.map((l) => el("option", { value: String(l.entry_id), text: `#${l.entry_id} · ${t(KIND[l.kind])} · ${money(l.amount, st.currency)} · ${dateTime(l.created_at)}` })));
  const form = el("form", { class: "row", "data-test": "co-form" },
    el("label", {}, el("span", { text: t("sp_entry") }), entry),
    el("label", {}, el("span", { text: t("co_dispute") }), el("input", { name: "dispute_id", type: "number", min: "1", step: "1", inputmode: "numeric", autocomplete: "off" })),
    el("label", {}, el("span", { text: t("sp_reason") }), el("input", { name: "reason", required: true, maxLength: 1000, autocomplete: "off" })),
    el("button", { type: "submit", class: "primary", text: t("co_propose") }));
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const body = { player: st.player, entry_id: Number(f.get("entry_id")), reason: String(f.get("reason")).trim() };
    if (f.get("dispute_id")) body.dispute_id = Number(f.get("dispute_id"));
    result.className = "sub";
    try {
      const r = await post("/api/finance/refunds", body);
      form.reset();
      await loadRefunds();
      result.textContent = `✔ #${r.id}: ${t("co_proposed")}`;
    } catch (e) { result.className = "error-text"; result.textContent = `✘ ${why(e)}`; }
  };
  box.replaceChildren(el("h4", { text: t("co_title") }), el("p", { class: "sub", text: t("co_hint") }), form, result);
}
