// The live table over the WebSocket: snapshot, events with seq, actions with the seq seen.
// Everything is drawn from the viewer's side: he sits at the bottom, his partner across, the
// rivals left and right; scores read "us / them"; summaries are his.
import { el, get } from "./api.js";
import { t, reaction, money, num } from "./i18n.js";
import { tileSvg, tileBacks, parseTile, buildChain } from "./tiles.js";
import { layoutSnake } from "./snake.js";
import * as fair from "./guard.js";
import { RematchPanel } from "./rematch.js";

const $ = (id) => document.getElementById(id);
const NS = "http://www.w3.org/2000/svg";
const TOAST_MS = 2600;
const MAX_TOASTS = 3;
const RECONNECT_MAX_MS = 10_000;
const DRAG_PX = 12;
const SUMMARY_MS = 9000;       // a hand's summary stays this long unless closed
const SUMMARY_MIN_MS = 3500;   // ... and at least this long when the player must play

function randomSeed() {
  const b = new Uint8Array(18);
  crypto.getRandomValues(b);
  return btoa(String.fromCharCode(...b)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function sha256hex(text) {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(d), (x) => x.toString(16).padStart(2, "0")).join("");
}

function short(hex) { return hex ? `${hex.slice(0, 10)}…${hex.slice(-6)}` : "—"; }

export class Table {
  // info: {title, stakeCents, currency, seatCount} from the lobby when known.
  constructor(matchId, me, onOver, info = {}) {
    this.matchId = matchId;
    this.me = me;
    this.onOver = onOver;
    this.info = info;
    this.seq = 0;
    this.view = null;
    this.ws = null;
    this.closed = false;
    this.retryMs = 1000;
    this.skewMs = null;        // server clock minus ours, from the newest event's at_ms
    this.commitments = {};     // deal_id -> server commitment hex
    this.pending = null;       // tile awaiting an end choice
    this.refs = 0;
    this.sentSeedFor = new Set();
    this.summaryShownFor = new Set();
    this.overShown = false;
    this.timer = setInterval(() => this.tick(), 250);
    $("seed-input").value = randomSeed();
    $("my-seed").textContent = "—";
    $("seed-status").textContent = t("seedwaiting");
    $("seed-send").onclick = () => this.sendSeed(true);
    $("end-left").onclick = () => this.chooseEnd("left");
    $("end-right").onclick = () => this.chooseEnd("right");
    $("chat-log").replaceChildren();
    $("toasts").replaceChildren();
    $("hand-summary").hidden = true;
    $("match-over").hidden = true;
    $("match-over").replaceChildren();
    $("reconnect").hidden = true;
    $("board").replaceChildren();
    $("hand").replaceChildren();
    this.wirePanels();
    this.chatButtons();
    this.onKey = (ev) => this.keydown(ev);
    document.addEventListener("keydown", this.onKey);
    // A phone that loses its network: say so at once and reconnect as soon as it is back.
    this.onOffline = () => { $("reconnect").hidden = false; if (this.ws) this.ws.close(); };
    this.onOnline = () => { if (!this.closed && this.ws?.readyState !== WebSocket.OPEN) { this.retryMs = 1000; this.connect(); } };
    window.addEventListener("offline", this.onOffline);
    window.addEventListener("online", this.onOnline);
    this.resize = new ResizeObserver(() => { this.drawBoard(); this.sizeHand(); });
    this.resize.observe($("board"));
    this.resize.observe($("hand"));
    this.connect();
  }

  // ------------------------------------------------------------------ connection
  connect() {
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) { const old = this.ws; this.ws = null; old.close(); }
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}/api/matches/${encodeURIComponent(this.matchId)}/ws?after=${this.seq || 0}`);
    this.ws = ws;
    ws.onopen = () => {
      this.retryMs = 1000;
      if (!$("reconnect").hidden) { $("reconnect").hidden = true; this.toast(t("reconnected")); }
    };
    ws.onmessage = (m) => this.onMessage(JSON.parse(m.data));
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      // 4001: the session ended (signed out, locked, self-excluded): no point retrying.
      if (e.code === 4001) this.closed = true;
      if (this.closed) return;
      $("reconnect").hidden = false;
      setTimeout(() => { if (!this.closed && this.ws === ws) this.connect(); }, this.retryMs);
      this.retryMs = Math.min(RECONNECT_MAX_MS, this.retryMs * 2);
    };
  }

  close() {
    this.closed = true;
    this.rematch?.stop();
    clearInterval(this.timer);
    document.removeEventListener("keydown", this.onKey);
    window.removeEventListener("offline", this.onOffline);
    window.removeEventListener("online", this.onOnline);
    this.resize.disconnect();
    if (this.ws) this.ws.close();
  }

  send(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  act(action) {
    this.refs += 1;
    this.send({ type: "action", ref: `r${this.refs}`, seq: this.seq, action });
    return `r${this.refs}`;
  }

  onMessage(m) {
    const p = (m.type === "ack" || m.type === "error") && this.pendingSeeds?.get(m.ref);
    if (p) {
      // the page's own fairness checks keep a seed only once the engine took its commitment;
      // a refused commit or reveal (a stale view) is sent again with the next view
      this.pendingSeeds.delete(m.ref);
      if (m.type === "ack" && p.kind === "c") fair.remember(p.deal, p.seat, p.seed, p.commitment);
      if (m.type === "error") this.sentSeedFor.delete(p.kind + p.deal);
    }
    if (m.type === "ack") {
      // Our action was applied; its update (the new events and our view) rides on the ack.
      if (m.update) this.onMessage({ type: "update", ...m.update });
    } else if (m.type === "hello") {
      this.seat = m.seat;
    } else if (m.type === "events") {
      this.events(m.events);
      this.seq = Math.max(this.seq, m.seq);
    } else if (m.type === "update") {
      this.view = m.view;
      this.events(m.events);
      this.seq = m.seq;
      this.render();
    } else if (m.type === "snapshot") {
      this.seq = m.seq;
      this.view = m.view;
      this.render();
    } else if (m.type === "chat") {
      const who = this.nameOf(m.seat);
      const text = m.kind === "reaction" ? reaction(m.code) : t("phrase_" + m.code);
      $("chat-log").prepend(el("li", { text: `${who}: ${text}` }));
      while ($("chat-log").children.length > 30) $("chat-log").lastChild.remove();
      this.toast(`${who}: ${text}`);
    } else if (m.type === "error") {
      if (m.error === "stale_seq") this.send({ type: "snapshot" });
      else this.toast(`⚠ ${m.detail || m.error}`);
    }
  }

  events(list) {
    const fresh = list.filter((e) => e.seq > this.seq);
    // The first frame after opening the table replays the match so far: history, not news
    // (no toasts or summaries for hands long over, no clock estimate from old stamps).
    const live = this.seq > 0;
    for (const e of fresh) this.onEvent(e, !live);
    if (fresh.length && live) {
      // The server stamped this event before we got it: server now >= at_ms.
      const est = fresh[fresh.length - 1].at_ms - Date.now();
      this.skewMs = this.skewMs === null ? est : Math.max(this.skewMs, est);
    }
  }

  // ------------------------------------------------------------------ seats and names
  seatCount() { return this.view?.state?.seats?.length || this.info.seatCount || 4; }
  mySeat() { return this.view ? this.view.seat : this.seat; }

  pairs() {
    const st = this.view?.state;
    if (!st) return false;
    return st.seats.length === 4 && st.scores.length === 2;
  }

  sideOf(seat) { return this.pairs() ? seat % 2 : seat; }
  mySide() { return this.sideOf(this.mySeat()); }

  nameOf(seat) {
    if (seat === this.mySeat()) return t("you");
    const s = this.view?.state?.seats?.[seat];
    if (!s) return `${t("seat")} ${seat + 1}`;
    if (s.bot && !s.player_id) return `${t("cpuplayer")} ${seat + 1}`;
    return s.player_id || `${t("seat")} ${seat + 1}`;
  }

  // Viewer-relative places: play passes to the right (counter-clockwise).
  places() {
    const n = this.seatCount(), me = this.mySeat();
    if (n === 2) return { top: (me + 1) % 2 };
    if (n === 3) return { right: (me + 1) % 3, left: (me + 2) % 3 };
    return { right: (me + 1) % 4, top: (me + 2) % 4, left: (me + 3) % 4 };
  }

  // ------------------------------------------------------------------ announcements
  toast(text, cls = "") {
    const box = $("toasts");
    const a = el("div", { class: "toast " + cls, text });
    box.append(a);
    while (box.children.length > MAX_TOASTS) box.firstChild.remove();
    setTimeout(() => a.remove(), TOAST_MS);
  }

  onEvent(e, quiet = false) {
    const d = e.data || {};
    // The page's own fairness checks (guard.js) run for replayed events too: a reload between
    // the commit and the reveal still checks the receipt, and an unchecked hand gets checked.
    if (e.kind === "seed_reveals_open") {
      fair.onCommitClosed(d.deal_id).catch((err) => this.toast(`✘ ${t("fair_receipt_failed")}: ${err.message}`));
    } else if (e.kind === "hand_ended") {
      fair.onHandEnded(d.deal_id, { history: quiet }).catch((err) => this.toast(`✘ ${t("fair_check_failed")}: ${err.message}`));
    }
    if (quiet && e.kind !== "deal_commitment") return;
    switch (e.kind) {
      case "deal_commitment": {
        const c = d.commitment?.record?.commitment;
        if (c) this.commitments[d.deal_id] = c;
        $("deal-commitment").textContent = c ? short(c) : "—";
        $("deal-commitment").title = c || "";
        break;
      }
      case "pass": this.toast(d.seat === this.mySeat() ? t("pass_me") : `${this.nameOf(d.seat)} ${t("pass")}`); break;
      case "bonus": {
        const name = this.bonusName(d.kind);
        const side = this.sideLabel(d.side);
        this.toast(`${name} +${num(d.points)} ${side}${d.counted ? "" : ` (${t("notcounted")})`}`, d.kind === "capicua" ? "capicua" : "");
        break;
      }
      case "hand_ended": this.handSummary(d); break;
      case "match_ended": this.matchOver(d); break;
      case "match_void": this.matchOver({ status: "void", reason: d.reason, winner_seats: [], scores: this.view?.state?.scores || [] }); break;
      default: break;
    }
  }

  bonusName(kind) {
    if (kind === "capicua") return t("capicua");
    if (kind === "pase_corrido") return t("pase_corrido");
    if (String(kind).startsWith("pase")) return t("pase");
    return t("bonus");
  }

  sideLabel(side) {
    if (this.pairs()) return side === this.mySide() ? t("us") : t("them");
    return side === this.mySeat() ? t("you") : this.nameOf(side);
  }

  // Scores from the viewer's side: [mine, theirs...] with labels.
  scoreLines(scores) {
    const s = scores || [];
    if (this.pairs()) {
      const me = this.mySide();
      return [[t("us"), s[me] ?? 0], [t("them"), s[1 - me] ?? 0]];
    }
    const me = this.mySeat();
    return [[t("you"), s[me] ?? 0], ...s.map((v, i) => [this.nameOf(i), v]).filter((_, i) => i !== me)];
  }

  handSummary(d) {
    const r = d.result || {};
    if (this.summaryShownFor.has(d.deal_id)) return;
    this.summaryShownFor.add(d.deal_id);
    if (r.end === "tranque") this.toast(t("tranque"));
    const box = $("hand-summary");
    const how = t("end_" + (r.end || "domino"));
    const winner = r.winner_seat !== null && r.winner_seat !== undefined ? this.nameOf(r.winner_seat)
      : r.winner_side !== null && r.winner_side !== undefined ? this.sideLabel(r.winner_side) : "—";
    const mine = r.winner_side !== undefined && r.winner_side !== null && r.winner_side === this.mySide();
    const rows = [];
    if (r.points !== undefined) rows.push(el("tr", {}, el("th", { text: t("points") }), el("td", { class: "num", text: `+${num(r.points)} ${r.winner_side !== null && r.winner_side !== undefined ? this.sideLabel(r.winner_side) : ""}` })));
    for (const b of r.bonuses || []) {
      rows.push(el("tr", {}, el("th", { text: `${this.bonusName(b.kind)} (${this.sideLabel(b.side)})` }),
        el("td", { class: "num", text: `+${num(b.points)} · ${b.counted ? t("counted") : t("notcounted")}` })));
    }
    const score = this.scoreLines(r.scores || this.view?.state?.scores);
    box.replaceChildren(
      el("h3", { text: `${t("handover")}: ${how}` }),
      el("p", { class: `big ${mine ? "win" : "loss"}`, text: r.winner_seat === this.mySeat() ? t("youwonhand") : `${t("handto")} ${winner}` }),
      el("table", {}, el("tbody", {}, ...rows)),
      el("p", { class: "big", "data-test": "hand-score", text: `${t("newscore")}: ${score.map(([k, v]) => `${k} ${num(v)}`).join(" · ")}` }),
      el("button", { type: "button", class: "primary", text: t("continue"), "data-test": "hand-continue", onclick: () => this.hideSummary() }),
    );
    box.hidden = false;
    if ($("hand").contains(document.activeElement) || document.activeElement === document.body) box.querySelector("button").focus({ preventScroll: true });
    this.summaryAt = Date.now();
    clearTimeout(this.summaryTimer);
    this.summaryTimer = setTimeout(() => this.hideSummary(), SUMMARY_MS);
  }

  hideSummary() {
    clearTimeout(this.summaryTimer);
    if ($("hand-summary").hidden) return;
    $("hand-summary").hidden = true;
    this.focusHand();
  }

  async matchOver(d) {
    if (this.overShown) return;
    this.overShown = true;
    $("hand-summary").hidden = true;
    const box = $("match-over");
    const me = this.mySeat();
    const void_ = d.status === "void";
    const mine = (d.winner_seats || []).includes(me);
    const headline = void_ ? t("voided") : mine ? (this.pairs() ? t("youwinpair") : t("youwin")) : (this.pairs() ? t("youlosepair") : t("youlose"));
    const score = this.scoreLines(d.scores);
    const money_ = el("table", { class: "money" }, el("tbody", { id: "money-rows" }));
    box.dataset.test = "match-over";
    box.replaceChildren(
      el("h3", { text: t("matchover") }),
      el("p", { class: `big ${mine ? "win" : "loss"}`, "data-test": "match-result", text: headline }),
      el("p", { text: score.map(([k, v]) => `${k} ${num(v)}`).join(" · ") }),
      money_,
      el("div", { class: "row" },
        el("button", { type: "button", class: "primary", text: t("backlobby"), "data-test": "over-lobby", onclick: () => $("back-lobby").click() }),
        this.againButton()),
    );
    box.hidden = false;
    box.querySelector("[data-test=over-lobby]").focus({ preventScroll: true });
    if (this.onOver) this.onOver(d);
    if (!void_) await this.showMoney(mine);
  }

  againButton() {
    const st = this.view?.state;
    const kind = this.info.kind || this.info.resolveKind?.(st);
    if (!this.info.playAgain || !st || !kind) return "";
    const me = this.mySeat();
    const cpu = st.seats.every((s) => s.seat === me || (s.bot && !s.player_id));
    if (!cpu && st.seats.every((s) => s.player_id) && this.info.onRematch) {
      // The same people again: each must accept; the panel shows who is still to answer.
      this.rematch = new RematchPanel(this.matchId, { onSeated: (r) => this.info.onRematch(r) });
      this.rematch.start();
      return this.rematch.element();
    }
    const mate = this.pairs() ? st.seats[(me + 2) % 4] : null;
    const partner = mate && mate.player_id && !mate.bot ? mate.player_id : undefined;
    return el("button", { type: "button", text: partner ? `${t("playagain")} (${partner})` : t("playagain"), "data-test": "play-again",
      onclick: () => this.info.playAgain({ kind, tier: st.tier, partner, cpu }) });
  }

  // The money of the match from the player's own statement (the ledger's truth), shown to
  // every player, the loser too: the pot, the house commission (the ledger's figure on the
  // statement line once the pot is settled) and his own win or loss.
  async showMoney(mine) {
    const tier = this.view?.state?.tier;
    if (!tier || tier === "free") return;
    const rows = $("money-rows");
    if (!rows) return;
    const stake = this.info.stakeCents ?? Math.round(Number(tier) * 100);
    const seats = this.seatCount();
    const pot = stake * seats;
    const row = (k, v, cls = "", test = "", cents = null) => {
      const td = el("td", { class: `num ${cls}`, text: v });
      if (test) td.dataset.test = test;
      if (cents !== null) td.dataset.cents = String(cents);
      return el("tr", {}, el("th", { text: k }), td);
    };
    rows.replaceChildren(row(t("pot"), money(pot)), row(t("yourresult"), t("settling")));
    let net = null, credit = 0, commission = null;
    for (let i = 0; i < 20 && (net === null || commission === null); i += 1) {
      try {
        const st = await get("/api/me/statement");
        const lines = st.lines.filter((l) => l.match_id === this.matchId);
        credit = lines.filter((l) => l.amount > 0).reduce((s, l) => s + l.amount, 0);
        if (!mine || credit > 0) net = credit - stake;
        commission = lines.find((l) => Number.isInteger(l.commission))?.commission ?? null;
      } catch { /* shown as settling; the wallet has it */ }
      if (net === null || commission === null) await new Promise((r) => setTimeout(r, 500));
    }
    const out = [row(t("pot"), money(pot), "", "pot", pot)];
    if (commission !== null) out.push(row(t("commission"), money(commission), "", "commission", commission));
    if (net !== null) out.push(row(t("yourresult"), `${net >= 0 ? "+" : ""}${money(net)}`, net >= 0 ? "win" : "loss", "my-net", net));
    rows.replaceChildren(...out);
  }

  // ------------------------------------------------------------------ timer
  tick() {
    const st = this.view?.state;
    const d = st?.deadline;
    for (const e of document.querySelectorAll(".s-timer")) e.textContent = "";
    if (!d) { $("timer").textContent = ""; return; }
    const now = Date.now() + (this.skewMs ?? 0);
    const s = Math.max(0, Math.ceil((d.at_ms - now) / 1000));
    const mine = d.seats.includes(this.mySeat());
    $("timer").textContent = mine ? `${s} s` : "";
    $("timer").classList.toggle("urgent", s <= 5);
    for (const seat of d.seats) {
      const slot = document.querySelector(`[data-seat="${seat}"] .s-timer`);
      if (slot) slot.textContent = `${s} s`;
    }
  }

  // ------------------------------------------------------------------ seeds
  async sendSeed(manual) {
    const v = this.view;
    if (!v) return;
    const deal = v.state.deal_id;
    const legal = v.legal.map((a) => a.type);
    const key = `mesa-seed-${this.matchId}-${deal}`;
    if (legal.includes("seed_commit")) {
      if ($("own-seed").checked && !manual) return;
      const seed = $("seed-input").value.trim();
      if (!/^[A-Za-z0-9_-]{0,64}$/.test(seed)) { this.toast("A-Z a-z 0-9 _ -"); return; }
      if (this.sentSeedFor.has("c" + deal)) return;
      this.sentSeedFor.add("c" + deal);
      sessionStorage.setItem(key, seed);
      const commitment = await sha256hex(seed);
      $("my-seed").textContent = short(commitment);
      $("seed-status").textContent = t("seedcommitted");
      const ref = this.act({ type: "seed_commit", commitment });
      this.pendingSeeds = this.pendingSeeds || new Map();
      this.pendingSeeds.set(ref, { kind: "c", deal, seat: v.seat ?? this.mySeat(), seed, commitment });
    } else if (legal.includes("seed_reveal")) {
      if (this.sentSeedFor.has("r" + deal)) return;
      const seed = sessionStorage.getItem(key);
      if (seed === null) return;
      this.sentSeedFor.add("r" + deal);
      await fair.receiptBeforeReveal(deal); // the log holds every commitment before we reveal
      $("my-seed").textContent = seed || "—";
      $("seed-status").textContent = `✔ ${t("seedrevealed")}`;
      const ref = this.act({ type: "seed_reveal", seed });
      this.pendingSeeds = this.pendingSeeds || new Map();
      this.pendingSeeds.set(ref, { kind: "r", deal });
      $("seed-input").value = randomSeed();
    }
  }

  // ------------------------------------------------------------------ drawing
  render() {
    const v = this.view;
    const st = v.state;
    const resolved = this.info.title ? null : this.info.resolveKind?.(st);
    const title = this.info.title || (resolved && this.info.kindTitle ? this.info.kindTitle(resolved) : st.variant);
    $("table-title").textContent = `${title} · ${st.tier === "free" ? t("free") : money(Math.round(Number(st.tier) * 100))} · ${t("handno")} ${num(st.hand_no)}`;
    const [[k1, s1], ...rest] = this.scoreLines(st.scores);
    $("score-us").textContent = num(s1);
    $("score-us").previousElementSibling.textContent = k1;
    $("score-them").textContent = rest.map(([, s]) => num(s)).join(" / ");
    $("score-them").previousElementSibling.textContent = rest.length === 1 ? rest[0][0] : t("rivals");
    this.drawSeats();
    if (st.deal_id && this.commitments[st.deal_id]) $("deal-commitment").textContent = short(this.commitments[st.deal_id]);
    const { chain, left, right } = buildChain(st.table || []);
    this.chain = chain;
    this.ends = [left, right];
    this.drawBoard();
    this.drawHand();
    if (!$("hand-summary").hidden && v.legal.some((a) => a.type === "play")) {
      clearTimeout(this.summaryTimer);
      this.summaryTimer = setTimeout(() => this.hideSummary(), Math.max(0, SUMMARY_MIN_MS - (Date.now() - this.summaryAt)));
    }
    $("end-choice").hidden = true;
    this.pending = null;
    const actions = $("actions");
    actions.replaceChildren();
    for (const a of v.legal) {
      if (a.type === "choose") actions.append(el("button", { type: "button", text: a.salgo ? t("salgo") : t("saltu"), onclick: () => this.act({ type: "choose", salgo: a.salgo }) }));
      if (a.type === "redeal") actions.append(el("button", { type: "button", text: t("redeal"), onclick: () => this.act({ type: "redeal" }) }));
      if (a.type === "claim") actions.append(el("button", { type: "button", text: t("claim"), onclick: () => this.act({ type: "claim" }) }));
    }
    if ((st.status === "finished" || st.status === "void") && !this.overShown) {
      const r = st.result || {};
      this.matchOver({ status: st.status === "void" ? "void" : "finished", winner_seats: r.winner_seats || [], scores: r.scores || st.scores });
    }
    this.tick();
    this.sendSeed(false);
  }

  seatCard(seat, partner) {
    const st = this.view.state;
    const turn = st.turn === seat && st.phase === "play" && st.status === "playing";
    const card = el("div", { class: `seat${turn ? " on-turn" : ""}`, "data-seat": String(seat), "data-test": "seat" },
      el("span", { class: "s-name", text: this.nameOf(seat) }));
    if (partner) card.append(el("span", { class: "s-partner", text: t("partnerlabel") }));
    const n = st.counts?.[seat] ?? 0;
    card.append(tileBacks(n), el("span", { class: "s-timer" }));
    card.setAttribute("aria-label", `${this.nameOf(seat)}${partner ? ` (${t("partnerlabel")})` : ""}: ${n} ${t("tilesleft")}${turn ? ` · ${t("turnof")} ${this.nameOf(seat)}` : ""}`);
    card.setAttribute("role", "group");
    return card;
  }

  drawSeats() {
    const p = this.places();
    const partner = this.pairs() ? (this.mySeat() + 2) % 4 : -1;
    for (const where of ["top", "left", "right"]) {
      const slot = $(`seat-${where}`);
      slot.replaceChildren(...(p[where] === undefined ? [] : [this.seatCard(p[where], p[where] === partner)]));
    }
    const st = this.view.state;
    const me = this.mySeat();
    const myTurn = st.turn === me && st.phase === "play" && st.status === "playing";
    const card = $("seat-me");
    card.className = `seat me${myTurn ? " on-turn" : ""}`;
    card.dataset.seat = String(me);
    card.replaceChildren(el("span", { class: "s-name", text: myTurn ? t("yourturn") : this.nameOf(me) }));
  }

  drawBoard() {
    const board = $("board");
    if (!this.chain) return;
    const w = board.clientWidth, h = board.clientHeight;
    if (!w || !h) return;
    const pad = 8;
    const L = layoutSnake(this.chain, { width: w - 2 * pad, height: h - 2 * pad }, Math.max(16, Math.min(40, w / 9)));
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `${-pad} ${-pad} ${w} ${h}`);
    svg.setAttribute("aria-hidden", "true");
    for (const tl of L.tiles) {
      let node;
      if (tl.dir === "r") node = tileSvg(tl.a, tl.b);
      else if (tl.dir === "l") node = tileSvg(tl.b, tl.a);
      else node = tileSvg(tl.a, tl.b, true);
      node.setAttribute("x", String(tl.x)); node.setAttribute("y", String(tl.y));
      node.setAttribute("width", String(tl.w)); node.setAttribute("height", String(tl.h));
      node.classList.add("chain-tile");
      svg.append(node);
    }
    this.endPos = {};
    for (const e of L.ends) {
      const r = Math.max(9, L.unit * 0.62);
      const ring = document.createElementNS(NS, "circle");
      ring.setAttribute("cx", String(e.cx)); ring.setAttribute("cy", String(e.cy)); ring.setAttribute("r", String(r));
      ring.setAttribute("class", "end-mark");
      ring.dataset.end = e.side;
      svg.append(ring);
      this.endPos[e.side] = { x: e.cx + pad, y: e.cy + pad, value: e.value };
    }
    board.replaceChildren(svg);
    const [l, r] = this.ends || [];
    board.setAttribute("aria-label", this.chain.length ? `${t("board_label")}: ${l} · ${r}` : t("nothingplayed"));
    if (this.pending) this.placeEndButtons();
  }

  drawHand() {
    const v = this.view;
    const plays = v.legal.filter((a) => a.type === "play");
    const hand = $("hand");
    const focused = document.activeElement?.dataset?.tile;
    hand.replaceChildren();
    const myTurn = plays.length > 0;
    hand.classList.toggle("my-turn", myTurn);
    for (const tile of v.hand) {
      const [a, b] = parseTile(tile);
      const mine = plays.filter((p) => p.tile === tile);
      const btn = el("button", { type: "button", class: mine.length ? "tile legal" : "tile", "data-tile": tile });
      btn.setAttribute("aria-label", `${a}-${b}`);
      if (!mine.length) btn.setAttribute("aria-disabled", "true");
      btn.append(tileSvg(a, b, true));
      btn.onclick = () => { if (!this.dragged) this.playTile(tile, mine, btn); this.dragged = false; };
      this.dragSource(btn, tile, mine);
      hand.append(btn);
    }
    this.sizeHand();
    if (focused) hand.querySelector(`[data-tile="${focused}"]`)?.focus({ preventScroll: true });
    else if (myTurn && document.activeElement === document.body) this.focusHand();
  }

  // Tiles as large as the hand's fixed height allows, narrower (never under the 44 px touch
  // target) when many must share the width; past that the hand scrolls inside itself.
  sizeHand() {
    const hand = $("hand");
    const tiles = hand.querySelectorAll(".tile");
    if (!tiles.length) return;
    const cs = getComputedStyle(hand);
    const avail = hand.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    const gap = parseFloat(cs.columnGap) || 0;
    const maxH = hand.clientHeight - 12;
    const per = (avail - gap * (tiles.length - 1)) / tiles.length;
    const w = Math.max(44, Math.min(maxH / 2 + 6, per));
    const h = Math.min(maxH, (w - 6) * 2);
    for (const b of tiles) { b.style.width = `${w}px`; b.style.height = `${h}px`; }
    hand.classList.toggle("crowded", per < 44);
  }

  focusHand() {
    const b = $("hand").querySelector(".tile.legal") || $("hand").querySelector(".tile");
    if (b && $("hand-summary").hidden && $("match-over").hidden) b.focus({ preventScroll: true });
  }

  // Drag a tile onto the board: dropped nearer one end, it goes to that end.
  dragSource(btn, tile, entries) {
    btn.addEventListener("pointerdown", (ev) => {
      if (!entries.length) return;
      const x0 = ev.clientX, y0 = ev.clientY;
      let moved = false;
      const move = (e) => {
        const dx = e.clientX - x0, dy = e.clientY - y0;
        if (!moved && Math.hypot(dx, dy) < DRAG_PX) return;
        moved = true;
        btn.style.transform = `translate(${dx}px, ${dy}px)`;
      };
      const up = (e) => {
        window.removeEventListener("pointermove", move);
        window.removeEventListener("pointerup", up);
        btn.style.transform = "";
        if (!moved) return;
        this.dragged = true;
        const rect = $("board").getBoundingClientRect();
        if (e.clientX < rect.left || e.clientX > rect.right || e.clientY < rect.top || e.clientY > rect.bottom) return;
        const ends = new Set(entries.map((x) => x.end));
        if (ends.has("left") && ends.has("right") && this.endPos?.left) {
          const px = e.clientX - rect.left, py = e.clientY - rect.top;
          const dl = Math.hypot(px - this.endPos.left.x, py - this.endPos.left.y);
          const dr = Math.hypot(px - this.endPos.right.x, py - this.endPos.right.y);
          this.act({ type: "play", tile, end: dl <= dr ? "left" : "right" });
        } else {
          this.act({ type: "play", tile, end: entries[0].end ?? null });
        }
      };
      window.addEventListener("pointermove", move);
      window.addEventListener("pointerup", up);
    });
  }

  playTile(tile, entries, btn) {
    if (!entries.length) return;
    const ends = new Set(entries.map((e) => e.end));
    const [L, R] = this.ends;
    if (entries.length === 1 || !ends.has("left") || !ends.has("right") || L === R) {
      this.act({ type: "play", tile, end: entries[0].end ?? null });
      return;
    }
    // Both ends take the tile and they show different numbers: tap the end.
    for (const b of $("hand").querySelectorAll(".picked")) b.classList.remove("picked");
    btn?.classList.add("picked");
    this.pending = tile;
    this.placeEndButtons();
    $("end-choice").hidden = false;
    $("end-left").focus({ preventScroll: true });
  }

  placeEndButtons() {
    const board = $("board");
    for (const side of ["left", "right"]) {
      const b = $(`end-${side}`);
      const p = this.endPos?.[side];
      if (!p) continue;
      b.style.left = `${board.offsetLeft + p.x}px`;
      b.style.top = `${board.offsetTop + p.y}px`;
      b.textContent = `${t("end_of")} ${p.value}`;
    }
  }

  chooseEnd(end) {
    if (!this.pending) return;
    this.act({ type: "play", tile: this.pending, end });
    this.pending = null;
    $("end-choice").hidden = true;
  }

  // Keyboard: arrows move along the hand, Escape drops a pending end choice.
  keydown(ev) {
    if ($("screen-table").hidden) return;
    if (ev.key === "Escape") {
      if (!$("end-choice").hidden) { $("end-choice").hidden = true; this.pending = null; this.focusHand(); }
      for (const id of ["fairness", "chat-panel"]) if (!$(id).hidden) this.togglePanel(id, false);
      return;
    }
    const tiles = [...$("hand").querySelectorAll(".tile")];
    const i = tiles.indexOf(document.activeElement);
    if (i < 0) return;
    if (ev.key === "ArrowRight" || ev.key === "ArrowLeft") {
      ev.preventDefault();
      const j = (i + (ev.key === "ArrowRight" ? 1 : -1) + tiles.length) % tiles.length;
      tiles[j].focus({ preventScroll: true });
    }
  }

  // ------------------------------------------------------------------ panels
  togglePanel(id, open, moveFocus = true) {
    const panel = $(id);
    const btn = id === "fairness" ? $("shield-btn") : $("chat-btn");
    const show = open ?? panel.hidden;
    panel.hidden = !show;
    btn.setAttribute("aria-expanded", String(show));
    if (!moveFocus) return;
    if (show) panel.querySelector("button, input")?.focus(); else btn.focus();
  }

  wirePanels() {
    $("shield-btn").onclick = () => this.togglePanel("fairness");
    $("chat-btn").onclick = () => this.togglePanel("chat-panel");
    for (const b of document.querySelectorAll("[data-close]")) b.onclick = () => this.togglePanel(b.dataset.close, false);
    for (const id of ["fairness", "chat-panel"]) this.togglePanel(id, false, false);
  }

  chatButtons() {
    const box = $("chat-buttons");
    box.replaceChildren();
    const phrases = ["hola", "buena", "bien_jugado", "gracias", "suerte", "dale", "piensa", "tranque", "capicua", "otra", "adios"];
    for (const p of phrases) box.append(el("button", { type: "button", class: "chat-btn", text: t("phrase_" + p), onclick: () => this.send({ type: "chat", kind: "phrase", code: p }) }));
    for (const r of ["aplauso", "risa", "sorpresa", "fuego", "pulgar", "triste"]) box.append(el("button", { type: "button", class: "chat-btn", text: reaction(r), onclick: () => this.send({ type: "chat", kind: "reaction", code: r }) }));
  }
}
