// Identity and place on the wallet screen: may the player play for money from here, and if
// not, what he can do about it (GET /api/me/verification; reasons in i18n as err_<code>).
import { get } from "./api.js";
import { t, has } from "./i18n.js";

export async function loadVerification(line) {
  if (!line) return;
  let v;
  try {
    v = await get("/api/me/verification");
  } catch {
    v = { may_play_paid: false, reason: "identity_unavailable" };
  }
  const key = v.may_play_paid ? "vf_ok" : `err_${v.reason}`;
  line.textContent = has(key) ? t(key) : (v.detail || t("err_generic"));
  line.dataset.reason = v.reason || "";
  line.classList.toggle("warn", !v.may_play_paid);
}
