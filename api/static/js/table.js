// The live table over the WebSocket: snapshot, events with seq, actions with the seq seen.
import { el } from "./api.js";
import { t, reaction } from "./i18n.js";
import { tileSvg, parseTile, buildChain } from "./tiles.js";

const $ = (id) => document.getElementById(id);

function randomSeed() {
  const b = new Uint8Array(18);
  crypto.getRandomValues(b);
  return btoa(String.fromCharCode(...b)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function sha256hex(text) {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(d), (x) => x.toString(16).padStart(2, "0")).join("");
}

export class Table {
  constructor(matchId, me, onOver) {
    this.matchId = matchId;
    this.me = me;
    this.onOver = onOver;
    this.seq = 0;
    this.view = null;
    this.ws = null;
    this.closed = false;
    this.commitments = {};   // deal_id -> server commitment hex
    this.pending = null;     // tile awaiting an end choice
    this.refs = 0;
    this.sentSeedFor = new Set();
    this.timer = setInterval(() => this.tick(), 250);
    $("seed-input").value = randomSeed();
    $("seed-send").onclick = () => this.sendSeed(true);
    $("end-left").onclick = () => this.chooseEnd("left");
    $("end-right").onclick = () => this.chooseEnd("right");
    $("chat-log").replaceChildren();
    $("announce").replaceChildren();
    $("match-over").hidden = true;
    this.chatButtons();
    this.connect();
  }

  connect() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const after = this.seq || 0;
    const ws = new WebSocket(`${proto}://${location.host}/api/matches/${encodeURIComponent(this.matchId)}/ws?after=${after}`);
    this.ws = ws;
    ws.onmessage = (m) => this.onMessage(JSON.parse(m.data));
    ws.onclose = (e) => {
      // 4001: the session ended (signed out, locked, self-excluded): no point retrying.
      if (e.code === 4001) this.closed = true;
      if (!this.closed) setTimeout(() => this.connect(), 1000);
    };
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
    if (this.ws) this.ws.close();
  }

  send(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  act(action) {
    this.refs += 1;
    this.send({ type: "action", ref: `r${this.refs}`, seq: this.seq, action });
  }

  onMessage(m) {
    if (m.type === "ack") {
      // Our action was applied; its update (the new events and our view) rides on the ack.
      if (m.update) this.onMessage({ type: "update", ...m.update });
    } else if (m.type === "hello") {
      this.seat = m.seat;
    } else if (m.type === "events") {
      for (const e of m.events) this.onEvent(e);
      this.seq = Math.max(this.seq, m.seq);
    } else if (m.type === "update") {
      // The new events and this seat's view after them, in one frame.
      for (const e of m.events) this.onEvent(e);
      this.seq = m.seq;
      this.view = m.view;
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
    } else if (m.type === "error") {
      if (m.error === "stale_seq") this.send({ type: "snapshot" });
      else this.announce(`⚠ ${m.detail || m.error}`);
    }
  }

  nameOf(seat) {
    const s = this.view?.state?.seats?.[seat];
    if (!s) return `${t("seat")} ${seat}`;
    return s.bot && !s.player_id ? `${t("cpuplayer")} ${seat}` : (s.player_id || `${t("seat")} ${seat}`);
  }

  announce(text, cls = "") {
    const a = el("div", { class: "announce-item " + cls, text });
    $("announce").prepend(a);
    while ($("announce").children.length > 8) $("announce").lastChild.remove();
  }

  onEvent(e) {
    const d = e.data || {};
    switch (e.kind) {
      case "deal_commitment": {
        const c = d.commitment?.record?.commitment;
        if (c) this.commitments[d.deal_id] = c;
        $("deal-commitment").textContent = c || "—";
        $("deal-commitment").dataset.deal = d.deal_id;
        break;
      }
      case "seed_reveals_open": break;
      case "pass": this.announce(`${this.nameOf(d.seat)} ${t("pass")}`); break;
      case "bonus": {
        const name = d.kind === "capicua" ? t("capicua") : d.kind === "pase_corrido" ? t("pase_corrido") : d.kind.startsWith("pase") ? t("pase") : `${t("bonus")} ${d.kind}`;
        const side = this.mySide() === d.side ? t("us") : t("them");
        this.announce(`${name} +${d.points} ${side} ${d.counted ? "" : t("notcounted")}`, d.kind === "capicua" ? "capicua" : "bonus");
        break;
      }
      case "hand_ended": {
        const r = d.result || {};
        if (r.end === "tranque") this.announce(t("tranque"));
        if (r.winner_seat !== null && r.winner_seat !== undefined) this.announce(`${t("handwon")} ${this.nameOf(r.winner_seat)} (+${r.points})`);
        break;
      }
      case "match_ended": {
        const mine = (d.winner_seats || []).includes(this.seat);
        const box = $("match-over");
        box.hidden = false;
        box.dataset.test = "match-over";
        box.textContent = `${t("matchover")}: ${mine ? t("youwin") : t("youlose")} (${(d.scores || []).join(" - ")})`;
        this.announce(box.textContent, "over");
        if (this.onOver) this.onOver(d);
        break;
      }
      default: break;
    }
  }

  mySide() {
    const seat = this.view ? this.view.seat : this.seat;
    const n = this.view?.state?.seats?.length || 4;
    return n === 4 && this.pairs() ? seat % 2 : seat;
  }

  pairs() {
    const o = this.view?.state?.options || {};
    const n = this.view?.state?.seats?.length || 0;
    return n === 4 && (o.mode === "parejas" || o.mode === "2v2" || o.pairs === true || this.view?.state?.scores?.length === 2);
  }

  tick() {
    const d = this.view?.state?.deadline;
    if (!d) { $("timer").textContent = ""; return; }
    const s = Math.max(0, Math.ceil((d.at_ms - Date.now()) / 1000));
    $("timer").textContent = `⏱ ${s}s`;
    $("timer").classList.toggle("urgent", s <= 5);
  }

  async sendSeed(manual) {
    const v = this.view;
    if (!v) return;
    const deal = v.state.deal_id;
    const legal = v.legal.map((a) => a.type);
    const key = `mesa-seed-${this.matchId}-${deal}`;
    if (legal.includes("seed_commit")) {
      if ($("own-seed").checked && !manual) return;
      let seed = $("seed-input").value.trim();
      if (!/^[A-Za-z0-9_-]{0,64}$/.test(seed)) { this.announce("seed: A-Z a-z 0-9 _ -"); return; }
      if (this.sentSeedFor.has("c" + deal)) return;
      this.sentSeedFor.add("c" + deal);
      sessionStorage.setItem(key, seed);
      const commitment = await sha256hex(seed);
      $("seed-status").textContent = `${t("seedcommitted")}: ${commitment.slice(0, 16)}…`;
      this.act({ type: "seed_commit", commitment });
    } else if (legal.includes("seed_reveal")) {
      if (this.sentSeedFor.has("r" + deal)) return;
      const seed = sessionStorage.getItem(key);
      if (seed === null) return;
      this.sentSeedFor.add("r" + deal);
      $("seed-status").textContent = t("seedrevealed");
      this.act({ type: "seed_reveal", seed });
      $("seed-input").value = randomSeed();
    }
  }

  render() {
    const v = this.view;
    const st = v.state;
    $("table-title").textContent = `${st.variant} · ${st.tier === "free" ? t("free") : "$" + st.tier} · #${st.hand_no}`;
    const side = this.mySide();
    const scores = st.scores || [];
    if (this.pairs() || scores.length === 2) {
      $("score-us").textContent = scores[side] ?? 0;
      $("score-them").textContent = scores[1 - side] ?? 0;
    } else {
      $("score-us").textContent = scores[v.seat] ?? 0;
      $("score-them").textContent = scores.filter((_, i) => i !== v.seat).join(" / ");
    }
    // seats
    const seats = $("seats");
    seats.replaceChildren();
    for (const s of st.seats) {
      const turn = st.turn === s.seat && st.phase === "play";
      seats.append(el("div", { class: `seat${turn ? " on-turn" : ""}${s.seat === v.seat ? " me" : ""}`, text: `${this.nameOf(s.seat)} · ${st.counts?.[s.seat] ?? "?"}` }));
    }
    if (st.deal_id && this.commitments[st.deal_id]) $("deal-commitment").textContent = this.commitments[st.deal_id];
    // chain
    const { chain, left, right } = buildChain(st.table || []);
    this.ends = [left, right];
    const board = $("board");
    board.replaceChildren();
    for (const [a, b] of chain) {
      const node = el("span", { class: a === b ? "chain-tile double" : "chain-tile" });
      node.append(tileSvg(a, b, a === b));
      board.append(node);
    }
    // hand
    const plays = v.legal.filter((a) => a.type === "play");
    const hand = $("hand");
    hand.replaceChildren();
    for (const tile of v.hand) {
      const [a, b] = parseTile(tile);
      const mine = plays.filter((p) => p.tile === tile);
      const btn = el("button", { type: "button", class: mine.length ? "tile legal" : "tile", disabled: !mine.length, "data-tile": tile });
      btn.append(tileSvg(a, b));
      btn.onclick = () => this.playTile(tile, mine);
      hand.append(btn);
    }
    $("end-choice").hidden = true;
    // other actions
    const actions = $("actions");
    actions.replaceChildren();
    for (const a of v.legal) {
      if (a.type === "choose") actions.append(el("button", { type: "button", text: a.salgo ? t("salgo") : t("saltu"), onclick: () => this.act({ type: "choose", salgo: a.salgo }) }));
      if (a.type === "redeal") actions.append(el("button", { type: "button", text: t("redeal"), onclick: () => this.act({ type: "redeal" }) }));
      if (a.type === "claim") actions.append(el("button", { type: "button", text: t("claim"), onclick: () => this.act({ type: "claim" }) }));
    }
    $("announce").dataset.turn = st.turn === v.seat && plays.length ? "me" : "";
    if (st.phase === "play" && st.turn === v.seat && plays.length) $("timer").dataset.label = t("yourturn");
    if (st.status === "finished" || st.status === "void") {
      const box = $("match-over");
      box.hidden = false;
      box.dataset.test = "match-over";
      if (!box.textContent && st.result) {
        const mine = (st.result.winner_seats || []).includes(v.seat);
        box.textContent = `${t("matchover")}: ${mine ? t("youwin") : t("youlose")} (${(st.result.scores || []).join(" - ")})`;
      }
    }
    this.sendSeed(false);
  }

  playTile(tile, entries) {
    if (!entries.length) return;
    const ends = new Set(entries.map((e) => e.end));
    const [L, R] = this.ends;
    if (entries.length === 1 || !ends.has("left") || !ends.has("right") || L === R) {
      this.act({ type: "play", tile, end: entries[0].end ?? null });
      return;
    }
    // Both ends take the tile and they show different numbers: the choice matters.
    this.pending = tile;
    $("end-choice").hidden = false;
  }

  chooseEnd(end) {
    if (!this.pending) return;
    this.act({ type: "play", tile: this.pending, end });
    this.pending = null;
    $("end-choice").hidden = true;
  }

  chatButtons() {
    const box = $("chat-buttons");
    box.replaceChildren();
    const phrases = ["hola", "buena", "bien_jugado", "gracias", "suerte", "dale", "piensa", "tranque", "capicua", "otra", "adios"];
    for (const p of phrases) box.append(el("button", { type: "button", class: "chat-btn", text: t("phrase_" + p), onclick: () => this.send({ type: "chat", kind: "phrase", code: p }) }));
    for (const r of ["aplauso", "risa", "sorpresa", "fuego", "pulgar", "triste"]) box.append(el("button", { type: "button", class: "chat-btn", text: reaction(r), onclick: () => this.send({ type: "chat", kind: "reaction", code: r }) }));
  }
}
