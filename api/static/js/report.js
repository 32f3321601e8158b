// Fair play, the player's side: report a player you played with (from the table or from your
// history) and "seat me only with random opponents".
import { el, get, api, post } from "./api.js";
import { t } from "./i18n.js";

const CATEGORIES = ["collusion", "cheating", "abuse", "bot", "other"];
const $ = (id) => document.getElementById(id);

// The other people (not CPU seats) at a match the player sat at.
async function othersAt(matchId, myId) {
  const view = await get(`/api/matches/${encodeURIComponent(matchId)}`);
  return (view.state?.seats || []).filter((s) => s.player_id && !s.bot && s.player_id !== myId).map((s) => s.player_id);
}

function field(label, control) {
  return el("label", {}, el("span", { text: label }), control);
}

// Opens the report dialog for `matchId`; resolves once it is sent or closed. Errors of the
// request itself (not signed in, unknown match) are thrown to the caller's handler.
export async function openReport(matchId, myId) {
  const dlg = $("report-dialog");
  const others = await othersAt(matchId, myId);
  const status = el("p", { class: "sub", role: "status", "data-test": "report-status" });
  const title = el("h3", { id: "report-title", text: t("rep_title") });
  if (!others.length) {
    dlg.replaceChildren(title, el("p", { text: t("rep_nobody") }),
      el("button", { type: "button", class: "close-btn", text: t("close"), onclick: () => dlg.close() }));
    dlg.showModal();
    return;
  }
  const who = el("select", { name: "player", required: true, "data-test": "report-player" },
    ...others.map((p) => el("option", { value: p, text: p })));
  const what = el("select", { name: "category", required: true, "data-test": "report-category" },
    ...CATEGORIES.map((c) => el("option", { value: c, text: t(`rep_cat_${c}`) })));
  const words = el("textarea", { name: "text", maxLength: 500, rows: 3, "data-test": "report-text" });
  const send = el("button", { type: "submit", class: "primary", text: t("rep_send"), "data-test": "report-send" });
  const form = el("form", { class: "report-form", method: "dialog" },
    title,
    el("p", { class: "sub", text: t("rep_why") }),
    field(t("rep_player"), who), field(t("rep_category"), what), field(t("rep_text"), words),
    status,
    el("div", { class: "row" }, send,
      el("button", { type: "button", text: t("close"), onclick: () => dlg.close() })));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    send.disabled = true;
    try {
      await post("/api/reports", { match_id: matchId, player: who.value, category: what.value, text: words.value.trim() });
      status.textContent = t("rep_sent");
      form.replaceChildren(title, status,
        el("button", { type: "button", class: "close-btn", text: t("close"), onclick: () => dlg.close() }));
    } catch (e) {
      status.textContent = e?.code === "rate_limited" ? t("rep_limit") : t("rep_failed");
      send.disabled = false;
    }
  });
  dlg.replaceChildren(form);
  dlg.showModal();
}

// The "random opponents only" switch on the wallet screen.
export async function loadRandomOnly() {
  const box = $("random-only");
  // Not usable until it shows the saved choice: a tap before that would be overwritten by it.
  box.disabled = true;
  const prefs = await get("/api/preferences");
  box.checked = Boolean(prefs.random_opponents_only);
  box.disabled = false;
  box.onchange = async () => {
    box.disabled = true;
    try {
      const r = await api("PUT", "/api/preferences", { random_opponents_only: box.checked });
      box.checked = Boolean(r.random_opponents_only);
    } catch {
      box.checked = !box.checked;
    } finally {
      box.disabled = false;
    }
  };
}
