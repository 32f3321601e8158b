// The staff audit log (admins and auditors): who did what to whom, when and why; newest
// first, filtered by actor, subject or action, a page at a time.
import { get, el, ApiError } from "./api.js";
import { t, has, dateTime } from "./i18n.js";

const $ = (id) => document.getElementById(id);
let filters = {};

function field(name, key) {
  return el("label", {}, el("span", { text: t(key) }), el("input", { name, maxLength: 200, autocomplete: "off" }));
}

function skeleton() {
  const root = $("staff-root");
  if (root.childElementCount) return;
  const error = el("p", { id: "staff-error", class: "error-text" });
  error.setAttribute("role", "alert");
  root.append(
    el("form", { class: "row", "data-test": "staff-filter", onsubmit: (ev) => {
      ev.preventDefault();
      const f = new FormData(ev.target);
      filters = Object.fromEntries(["actor", "subject", "action"].map((k) => [k, String(f.get(k) || "").trim()]).filter(([, v]) => v));
      load();
    } }, field("actor", "sa_actor"), field("subject", "sa_subject"), field("action", "sa_action"),
    el("button", { type: "submit", class: "primary", text: t("show") })),
    error,
    el("ul", { id: "staff-list", class: "cards-list", "data-test": "staff-list" }),
    el("button", { type: "button", id: "staff-more", hidden: true, text: t("sp_more") }));
}

function item(a) {
  const detail = Object.entries(a.detail || {}).filter(([, v]) => v !== null).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(" · ");
  return el("li", { "data-action": a.action },
    el("div", { class: "grow" },
      el("strong", { text: `${a.action} · ${a.subject}` }),
      el("span", { class: "sub", text: `${dateTime(a.at)} · ${a.actor} (${has("role_" + a.actor_role) ? t("role_" + a.actor_role) : a.actor_role})` }),
      el("span", { class: "sub", text: `${t("sa_reason")}: ${a.reason}` }),
      detail ? el("span", { class: "sub", text: detail }) : ""));
}

async function load(before) {
  $("staff-error").textContent = "";
  const q = new URLSearchParams({ ...filters, limit: "50" });
  if (before) q.set("before", String(before));
  try {
    const page = await get(`/api/staff/audit?${q}`);
    const items = page.actions.map(item);
    if (before) $("staff-list").append(...items);
    else $("staff-list").replaceChildren(...(items.length ? items : [el("li", { class: "empty", text: t("sp_none") })]));
    $("staff-more").hidden = !page.next;
    $("staff-more").onclick = () => load(page.next);
  } catch (e) {
    $("staff-error").textContent = `✘ ${e instanceof ApiError && has("err_" + e.code) ? t("err_" + e.code) : e.detail || t("err_generic")}`;
  }
}

export async function loadStaff() {
  skeleton();
  await load();
}
