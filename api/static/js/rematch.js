// "Play again" with the same people on the match-over panel: propose it, or answer another
// player's proposal, and see its state (waiting for N, declined, expired, seated). It is an
// invitation to everyone of the match (api/routes_invitations.py): nobody is seated until
// everyone has accepted.
import { el, get, post, ApiError } from "./api.js";
import { t, has, num, getLang } from "./i18n.js";
import { seatingCutShort, CUT_SHORT } from "./invitations.js";

const POLL_MS = 2000;
const MAX_POLLS = 900; // half an hour at most, then the panel stops asking

function reason(e) {
  if (e instanceof ApiError && has(`err_${e.code}`)) return t(`err_${e.code}`);
  return e instanceof ApiError ? e.detail || t("err_generic") : t("err_generic");
}

export class RematchPanel {
  constructor(matchId, { onSeated }) {
    this.matchId = matchId;
    this.onSeated = onSeated;
    this.alive = true;
    this.polls = 0;
    this.timer = null;
    this.rematch = null;
    this.shown = "";
    this.box = el("div", { class: "rematch", "data-test": "rematch" });
    this.line = el("p", { class: "rematch-state", "data-test": "rematch-state", role: "status" });
    this.actions = el("div", { class: "row" });
    this.box.append(this.line, this.actions);
  }

  element() { return this.box; }

  stop() {
    this.alive = false;
    clearTimeout(this.timer);
  }

  async start() {
    try {
      this.show(await get(`/api/invitations/by-match/${encodeURIComponent(this.matchId)}`));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) this.offer();
      else this.say(reason(e));
    }
    this.schedule();
  }

  schedule() {
    clearTimeout(this.timer);
    if (!this.alive || this.polls >= MAX_POLLS) return;
    this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  async refresh() {
    if (!this.alive) return;
    this.polls += 1;
    try {
      this.show(await get(`/api/invitations/by-match/${encodeURIComponent(this.matchId)}`));
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 404)) this.say(reason(e));
    }
    const st = this.rematch?.status;
    if (!st || st === "pending" || st === "seating") this.schedule();
  }

  say(text) { this.line.textContent = text; }

  button(key, test, onclick, primary = false) {
    return el("button", { type: "button", class: primary ? "primary" : "", text: t(key), "data-test": test, onclick });
  }

  offer() {
    this.say("");
    this.actions.replaceChildren(this.button("playagain", "play-again", () => this.act(() => post("/api/invitations/rematch", { match_id: this.matchId }))));
  }

  async act(call) {
    for (const b of this.actions.querySelectorAll("button")) b.disabled = true;
    try {
      this.show(await call());
      for (const b of this.actions.querySelectorAll("button")) b.disabled = false;
      this.schedule();
    } catch (e) {
      this.say(reason(e));
      for (const b of this.actions.querySelectorAll("button")) b.disabled = false;
    }
  }

  show(r) {
    // Everyone accepted: "seating" until the table is there, then "seated".
    const status = r.status === "accepted" ? (r.table_id ? "seated" : "seating") : r.status;
    this.rematch = { ...r, status };
    const id = r.invitation_id;
    this.box.dataset.status = status;
    // A poll that changes nothing leaves the panel alone: rebuilding it would take the focus
    // off its button, announce the status line again and wipe a refusal just shown.
    const key = JSON.stringify([getLang(), status, r.my_answer, r.waiting_for, r.sent_by_me, r.inviter]);
    if (key === this.shown) return;
    this.shown = key;
    if (status === "pending" && r.my_answer === "pending") {
      this.say(`${t("rm_invited")}: ${r.inviter}`);
      this.actions.replaceChildren(
        this.button("rm_accept", "rematch-accept", () => this.act(() => post(`/api/invitations/${id}/accept`)), true),
        this.button("rm_decline", "rematch-decline", () => this.act(() => post(`/api/invitations/${id}/decline`))),
      );
      return;
    }
    if (seatingCutShort(r)) {
      // As the lobby lists it: anyone, the proposer too, may replay the seating.
      this.say(t(CUT_SHORT.line));
      this.actions.replaceChildren(this.button(CUT_SHORT.retry, "rematch-retry", () => this.act(() => post(`/api/invitations/${id}/accept`)), true));
      return;
    }
    if (status === "pending") {
      this.say(`${t("rm_waiting")}: ${num(r.waiting_for)}`);
      // The proposer withdraws it; anyone else declines (both end it for everyone).
      const end = r.sent_by_me
        ? this.button("cancel", "rematch-cancel", () => this.act(() => post(`/api/invitations/${id}/cancel`)))
        : this.button("rm_decline", "rematch-decline", () => this.act(() => post(`/api/invitations/${id}/decline`)));
      this.actions.replaceChildren(end);
      return;
    }
    this.actions.replaceChildren();
    if (status === "seated") {
      this.say(t("rm_seated"));
      this.stop();
      this.onSeated?.(this.rematch);
      return;
    }
    const why = r.failure && has(`err_${r.failure}`) ? ` ${t(`err_${r.failure}`)}` : "";
    this.say(t(`rm_${status}`) + why);
    this.stop();
  }
}
