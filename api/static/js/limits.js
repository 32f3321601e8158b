// Responsible play (wallet screen): deposit and loss limits, session reminders, cool-off;
// and the reminder banner, shown on every screen (the table too) at each interval.
import { get, post, el } from "./api.js";
import { t, money, num, dateTime } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const NAMES = ["deposit_day", "deposit_week", "deposit_month", "loss_day", "loss_week", "loss_month"];
const COOL_OFF_HOURS = [24, 72, 168, 336, 672, 1008];
const REMINDERS = [0, 30, 60, 120];
let current = null;
let onError = (e) => { throw e; };

function cents(input) {
  const raw = String(input.value).trim().replace(",", ".");
  if (raw === "") return null;
  const v = Math.round(Number(raw) * 100);
  return Number.isFinite(v) && v > 0 ? v : NaN;
}

function limitField(name, lim) {
  const id = `lim-${name}`;
  const input = el("input", { id, name, type: "number", min: "0.01", step: "0.01", inputMode: "decimal", "data-test": id, value: lim.cents == null ? "" : (lim.cents / 100).toFixed(2) });
  input.placeholder = t("lim_none");
  const note = lim.pending_at
    ? el("span", { class: "lim-pending", text: `${t("lim_pending")} ${lim.pending_cents == null ? t("lim_none") : money(lim.pending_cents)} · ${dateTime(lim.pending_at)}` })
    : "";
  return el("label", { class: "lim-field", htmlFor: id }, el("span", { text: t("lim_" + name.split("_")[1]) }), input, note);
}

function coolOffText(hours) {
  return hours < 168 ? `${num(hours)} h` : `${num(hours / 168)} ${t(hours === 168 ? "lim_week1" : "lim_weeks")}`;
}

function render(limits) {
  current = limits;
  const box = $("limits-panel");
  const group = (kind) => el("fieldset", { class: "lim-group" },
    el("legend", { text: t("lim_" + kind) }),
    el("div", { class: "lim-grid" }, ...NAMES.filter((n) => n.startsWith(kind)).map((n) => limitField(n, limits[n]))));
  const reminder = el("select", { id: "lim-reminder", name: "reminder", "data-test": "lim-reminder" },
    ...REMINDERS.map((m) => el("option", { value: String(m), text: m ? `${num(m)} min` : t("lim_off") })));
  reminder.value = String(limits.reminder_min);
  const form = el("form", { id: "limits-form", class: "stack", onsubmit: (ev) => { ev.preventDefault(); save(form).catch(onError); } },
    group("deposit"), group("loss"),
    el("label", { htmlFor: "lim-reminder" }, el("span", { text: t("lim_reminder") }), reminder),
    el("button", { type: "submit", class: "primary", "data-test": "lim-save", text: t("lim_save") }));
  const cooling = limits.cooling_off_until
    ? el("p", { class: "lim-cooling", "data-test": "lim-cooling", text: `${t("lim_cooling")} ${dateTime(limits.cooling_off_until)}. ${t("lim_freeopen")}` })
    : "";
  const hours = el("select", { id: "lim-cool-hours", "data-test": "lim-cool-hours" }, ...COOL_OFF_HOURS.map((h) => el("option", { value: String(h), text: coolOffText(h) })));
  const cool = el("div", { class: "row" },
    el("label", { htmlFor: "lim-cool-hours" }, el("span", { text: t("lim_coollength") }), hours),
    el("button", { type: "button", "data-test": "lim-cool", text: t("lim_cooltake"), onclick: () => coolOff(Number(hours.value)).catch(onError) }));
  box.replaceChildren(
    el("h3", { text: t("lim_title") }),
    el("p", { class: "hint", text: t("lim_rules") }),
    form,
    el("h3", { text: t("lim_cooloff") }),
    cooling,
    el("p", { class: "hint", text: `${t("lim_coolrules")} ${t("lim_freeopen")}` }),
    cool,
    el("p", { id: "lim-result", role: "status" }));
}

async function save(form) {
  const limits = {};
  for (const name of NAMES) {
    const v = cents(form.elements[name]);
    if (Number.isNaN(v)) { $("lim-result").textContent = t("lim_bad"); return; }
    if (v !== current[name].cents) limits[name] = v;
  }
  const body = { limits, reminder_min: Number(form.elements.reminder.value) };
  render(await post("/api/me/limits", body));
  $("lim-result").textContent = t("lim_saved");
  scheduleReminder();
}

async function coolOff(hours) {
  render(await post("/api/me/cool-off", { hours }));
  $("lim-result").textContent = `${t("lim_cooling")} ${dateTime(current.cooling_off_until)}`;
}

// The wallet screen's section; `fail` shows a refusal the page's way.
export async function loadLimits(fail) {
  if (fail) onError = fail;
  render(await get("/api/me/limits"));
}

// ---------------------------------------------------------------- session reminders
let timer = null;

function played(seconds) {
  const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60);
  return h ? `${num(h)} h ${num(m)} min` : `${num(m)} min`;
}

function showBanner(s) {
  const banner = $("reminder");
  const net = s.net_cents > 0 ? `+${money(s.net_cents, s.currency)}` : money(s.net_cents, s.currency);
  banner.replaceChildren(
    el("span", { class: "grow", "data-test": "reminder-text", text: `${t("rem_played")} ${played(s.played_s)}. ${t("rem_net")} ${net}.` }),
    el("button", { type: "button", "data-test": "reminder-ok", text: t("rem_ok"), onclick: () => { banner.hidden = true; } }));
  banner.hidden = false;
}

async function tick(show) {
  const s = await get("/api/me/session");
  if (show) showBanner(s);
  clearTimeout(timer);
  if (!s.next_reminder_at) return;
  // Counted on the server's clock: a phone's clock that is off does not move the reminder.
  const wait = Math.max(new Date(s.next_reminder_at) - new Date(s.now), 1000);
  timer = setTimeout(() => tick(true).catch(() => { /* tried again at the next sign-in */ }), wait);
}

// For a signed-in player: the next reminder of this session, if he asked for them.
export function scheduleReminder() {
  tick(false).catch(() => { /* no reminder rather than an error */ });
}

export function stopReminders() {
  clearTimeout(timer);
  timer = null;
  const banner = $("reminder");
  if (banner) banner.hidden = true;
}
