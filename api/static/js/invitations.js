// The lobby's invitations: partner invitations and "play again" (everyone of a finished
// match) in one list (api/routes_invitations.py). Each item says what is offered (game and
// stake, "play again" first when it is one), who invites, who else is invited, who has not
// answered yet and when it expires; then Accept and Decline, or Cancel on one's own.
import { el } from "./api.js";
import { t, money, num, getLang } from "./i18n.js";

const cap = (s) => (s ? s[0].toUpperCase() + s.slice(1) : s);

export function inviteWhat(inv, kindTitle) {
  if (inv.op === "code" && !inv.match_id) return `${t("bycode")} ${inv.invite_code}`;
  const game = `${kindTitle(inv.kind)} · ${inv.tier === "free" ? t("free") : money(Math.round(Number(inv.tier) * 100))}`;
  return inv.match_id ? `${t("playagain")} · ${game}` : game;
}

// Everyone accepted and no table yet: being seated, or cut short by a failing service; any
// player may accept again ("Retry"), which replays the seating (nothing is taken twice).
// The match-over panel (rematch.js) shows the same state with the same words.
export const seatingCutShort = (inv) => inv.status === "accepted" && !inv.table_id;
export const CUT_SHORT = { line: "inv_cut_short", retry: "inv_retry" };

function secondsLeft(inv) {
  return Math.max(0, Math.round((Date.parse(inv.expires_at) - Date.now()) / 1000));
}

function expiry(inv) {
  return `${t("expiresin")} ${num(secondsLeft(inv))} ${t("seconds")}`;
}

// Who invites and who else is invited, as this player reads it.
function whoLines(inv, me) {
  const others = inv.invitees.filter((p) => p !== me);
  if (inv.sent_by_me) {
    return inv.match_id ? [`${t("inv_again_sent")}: ${others.join(", ")}`]
      : [`${t("youinvited")} ${others.join(", ")} ${t("inv_as_partner")}`];
  }
  if (!inv.match_id) return [`${inv.inviter} ${t("invitedyou")}`];
  const lines = [`${inv.inviter} ${t("inv_again_you")}`];
  if (others.length) lines.push(`${t("inv_also")}: ${others.join(", ")}`);
  return lines;
}

// His own answer, who has not answered (himself first, as "you"), and the time left; the
// seconds are their own span so that a poll updates them without rebuilding the item.
function statusLine(inv, me) {
  const waiting = inv.players.filter((p) => p.answer === "pending").map((p) => p.player);
  const names = [...(waiting.includes(me) ? [t("inv_you")] : []), ...waiting.filter((p) => p !== me)];
  if (seatingCutShort(inv)) return el("span", { class: "sub", text: t(CUT_SHORT.line) });
  const parts = [];
  if (!inv.sent_by_me && inv.my_answer === "accepted") parts.push(t("inv_you_accepted"));
  if (waiting.some((p) => p !== me)) parts.push(`${t("inv_waiting")}: ${names.join(", ")}`);
  const head = parts.join(" · ");
  const left = el("span", { "data-expires": inv.expires_at, text: head ? expiry(inv) : cap(expiry(inv)) });
  left.setAttribute("aria-live", "off"); // the countdown is not news every poll
  return el("span", { class: "sub" }, head ? `${cap(head)} · ` : "", left);
}

function item(inv, me, kindTitle, act) {
  const what = inviteWhat(inv, kindTitle);
  const who = inv.sent_by_me ? inv.invitees.join(", ") : inv.inviter;
  const button = (action, primary = false, label = action) => {
    const b = el("button", { type: "button", class: primary ? "primary" : "", text: t(label), "data-test": `invite-${action}`, onclick: () => act(inv, action) });
    b.setAttribute("aria-label", `${t(label)}: ${what} · ${who}`);
    return b;
  };
  const buttons = seatingCutShort(inv) ? [button("accept", true, CUT_SHORT.retry)]
    : inv.sent_by_me ? [button("cancel")]
    : inv.my_answer === "accepted" ? [button("decline")] // he may still withdraw his yes
    : [button("accept", true), button("decline")];
  return el("li", { class: inv.match_id ? "invite again" : "invite", "data-invitation": String(inv.invitation_id), "data-status": inv.status, "data-answer": inv.my_answer },
    el("div", { class: "grow" },
      el("strong", { class: "inv-what", text: what }),
      ...whoLines(inv, me).map((line, n) => el("span", { class: n ? "sub" : "inv-who", text: line })),
      statusLine(inv, me)),
    el("div", { class: "inv-actions" }, ...buttons));
}

let shown = "";

// Rebuilt only when an invitation or the language changed (a poll every 2 s would otherwise
// take the focus off a button and re-announce the live region); else the seconds tick.
export function renderInvitations(list, { me, kindTitle, act, empty }) {
  const key = JSON.stringify([getLang(), me, list]);
  $("invitations").hidden = !list.incoming.length && !list.outgoing.length;
  if (key === shown) {
    for (const s of $("invitations").querySelectorAll("[data-expires]")) {
      const text = expiry({ expires_at: s.dataset.expires });
      s.textContent = s.previousSibling?.textContent ? text : cap(text);
    }
    return;
  }
  shown = key;
  const render = (invs) => (invs.length ? invs.map((i) => item(i, me, kindTitle, act)) : [empty()]);
  $("invites-in").replaceChildren(...render(list.incoming));
  $("invites-out").replaceChildren(...render(list.outgoing));
}

function $(id) { return document.getElementById(id); }
