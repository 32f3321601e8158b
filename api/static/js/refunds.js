// Finance: support's refund proposals waiting for a decision. Approving asks the ledger for
// the reversal (once, however often it is clicked); the proposer can never decide his own.
import { get, post, el, ApiError } from "./api.js";
import { t, has, money, dateTime } from "./i18n.js";

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

export async function loadRefunds() {
  const box = section();
  const pending = await get("/api/finance/refunds?status=proposed");
  const result = el("p", { class: "sub" });
  result.setAttribute("role", "status");
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
      const input = el("input", { name: "reason", required: true, maxLength: 1000, autocomplete: "off" });
      return el("li", { "data-refund": String(r.id) },
        el("span", { class: "grow", text: `#${r.id} · ${r.player} · ${t(r.entry_kind === "deposit" ? "st_deposit" : "st_withdrawal")} #${r.entry_id} · ${t("rf_moves")} ${money(-r.amount, r.currency)} · ${r.proposed_by}, ${dateTime(r.proposed_at)} · ${r.reason}` }),
        el("label", {}, el("span", { text: t("sp_reason") }), input),
        el("button", { type: "button", class: "primary", "data-test": "rf-approve", text: t("rf_approve"), onclick: decide(r, "approve", input) }),
        el("button", { type: "button", "data-test": "rf-reject", text: t("rf_reject"), onclick: decide(r, "reject", input) }));
    }) : [el("li", { class: "empty", text: t("rf_none") })])));
}
