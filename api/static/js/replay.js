// A finished hand, step by step, from its transcript: the deal, every play, draw and pass in
// order with the two ends after it, then the result. `stepsOf` is pure (tested in Node); the
// viewer draws one step at a time with first / previous / next / last and the arrow keys.
import { el } from "./api.js";
import { t, has, num } from "./i18n.js";
import { tileSvg, parseTile } from "./tiles.js";

// Variants whose hand is blocked only when every seat has passed in a row (the others end it
// at once when no tile left in play fits either end); and when a seat draws before passing.
const TRANQUE_BY_PASSES = new Set(["casa"]);
function draws(variant, options, seats) {
  if (variant === "dominicana") return seats === 2;
  if (variant === "casa") return seats === 2;
  return false;
}

const key = (a, b) => (a <= b ? `${a}-${b}` : `${b}-${a}`);
const fits = (tile, end) => { const [a, b] = parseTile(tile); return a === end || b === end; };
const other = (tile, end) => { const [a, b] = parseTile(tile); return a === end ? b : a; };

// steps: [{kind: "deal"|"play"|"draw"|"pass"|"result", seat, tile, end, ends: [l, r] | null,
//          hands: [[tile...] per seat], chain: [[a, b]...] in table order, stock: count,
//          result (the transcript's, on the last step)}]. Throws on a transcript whose moves
// do not follow from its deal (the verifier's replay check says the same in words).
export function stepsOf(transcript) {
  const record = transcript?.commitment?.record || {};
  const variant = record.variant;
  const deal = transcript?.deal || { hands: [], stock: [] };
  const n = deal.hands.length;
  const moves = transcript?.moves || [];
  if (n < 2) throw new Error("not a played hand");
  const hands = deal.hands.map((h) => h.map(String));
  let stock = deal.stock.map(String);
  const drawing = draws(variant, record.options || {}, n) && stock.length > 0;
  const live = new Set([...hands.flat(), ...(drawing ? stock : [])].map((x) => key(...parseTile(x))));
  const chain = [];
  let ends = null;
  const steps = [];
  const snap = (step) => steps.push({ ...step, ends: ends ? [...ends] : null, hands: hands.map((h) => [...h]), chain: chain.map((c) => [...c]), stock: stock.length });
  const holder = (tile) => hands.findIndex((h) => h.some((x) => key(...parseTile(x)) === key(...parseTile(tile))));
  const canPlay = (s) => ends !== null && hands[s].some((x) => fits(x, ends[0]) || fits(x, ends[1]));
  snap({ kind: "deal", seat: null });

  // After seat `s` played: every forced draw and pass until a seat can play (its seat), or
  // null when all passed (a blocked hand).
  function forced(s) {
    let turn = s, passes = 0;
    while (passes < n) {
      turn = (turn + 1) % n;
      if (canPlay(turn)) return turn;
      while (drawing && stock.length && !canPlay(turn)) {
        const d = stock.shift();
        hands[turn].push(d);
        snap({ kind: "draw", seat: turn, tile: d });
      }
      if (canPlay(turn)) return turn;
      passes += 1;
      snap({ kind: "pass", seat: turn });
    }
    return null;
  }

  let turn = transcript.opener ?? (moves.length ? holder(moves[0].tile) : null);
  for (let i = 0; i < moves.length; i += 1) {
    const mv = moves[i];
    const seat = holder(mv.tile);
    if (seat < 0) throw new Error(`move ${i}: nobody holds ${mv.tile}`);
    if (turn !== null && seat !== turn) throw new Error(`move ${i}: seat ${turn} is on turn, not seat ${seat}`);
    const [a, b] = parseTile(mv.tile);
    let end;
    if (ends === null) {
      end = null;
      ends = [a, b];
      chain.push([a, b]);
    } else {
      const [L, R] = ends;
      const fl = fits(mv.tile, L), fr = fits(mv.tile, R);
      end = mv.end || (fl && fr ? (L === R ? "left" : null) : fl ? "left" : fr ? "right" : null);
      if (!end || (end === "left" ? !fl : !fr)) throw new Error(`move ${i}: ${mv.tile} does not fit (${L}, ${R})`);
      if (end === "left") { const o = other(mv.tile, L); chain.unshift([o, L]); ends = [o, R]; }
      else { const o = other(mv.tile, R); chain.push([R, o]); ends = [L, o]; }
    }
    hands[seat] = hands[seat].filter((x) => key(...parseTile(x)) !== key(a, b));
    live.delete(key(a, b));
    snap({ kind: "play", seat, tile: mv.tile, end });
    if (!hands[seat].length) { turn = null; break; }
    const blocked = ![...live].some((x) => fits(x, ends[0]) || fits(x, ends[1]));
    if (blocked && !TRANQUE_BY_PASSES.has(variant)) { turn = null; break; }
    if (i === moves.length - 1 && transcript.result?.end === "target") break;
    turn = forced(seat);
    if (turn === null) break;
  }
  steps.push({ ...steps[steps.length - 1], kind: "result", seat: transcript.result?.winner_seat ?? null, tile: undefined, end: undefined, result: transcript.result || null });
  return steps;
}

// The seats' names: `players` by seat when the caller knows them (the log itself names
// seats by pseudonyms); else `me` at the only human seat; else the pseudonym's start;
// "CPU n" for the house's seats.
function seatNames(transcript, players = [], me = null) {
  const seats = transcript?.commitment?.record?.seats || [];
  const humans = seats.filter((s) => s.player).length;
  return seats.map((s, i) => players[i] || (!s.player ? `${t("cpuplayer")} ${i + 1}` : me && humans === 1 ? me : String(s.player).slice(0, 10)));
}

// What the hand's end was, in words: dominó / capicúa / tranque, the winner and the points.
export function resultText(result, names) {
  if (!result) return t("rp_noresult");
  const capicua = (result.bonuses || []).some((b) => b.kind === "capicua");
  const how = capicua ? t("capicua") : has("end_" + result.end) ? t("end_" + result.end) : result.end;
  // A side wins when a bonus decides the match mid-hand: its seats (seat i is on side
  // i mod sides, as the rules core seats pairs).
  const sides = (result.scores || []).length || names.length;
  const side = result.winner_side ?? null;
  const who = result.winner_seat !== null && result.winner_seat !== undefined ? names[result.winner_seat] || `${result.winner_seat + 1}`
    : side !== null ? names.filter((_, i) => i % sides === side).join(" + ") : t("rp_nobody");
  return `${how} · ${t("rp_winner")}: ${who} · ${num(result.points || 0)} ${t("rp_points")}`;
}

function stepText(step, names) {
  const who = step.seat === null || step.seat === undefined ? "" : names[step.seat] || `${step.seat + 1}`;
  if (step.kind === "deal") return t("rp_deal");
  if (step.kind === "play") return `${who} ${t("rp_plays")} ${step.tile}${step.end ? ` (${t(step.end)})` : ""}`;
  if (step.kind === "draw") return `${who} ${t("rp_draws")}`;
  if (step.kind === "pass") return `${who} ${t("pass")}`;
  return resultText(step.result, names);
}

function tileEl(a, b, vertical, small = false) {
  const svg = tileSvg(a, b, vertical);
  if (small) svg.classList.add("rp-small");
  return svg;
}

// Opens the viewer in `box` (replacing what it held); returns {go(i), steps}.
// `names`: the players by seat, if known; `me`: the viewer, if he played the hand.
export function openReplay(box, transcript, { onClose, names: players, me } = {}) {
  const steps = stepsOf(transcript);
  const names = seatNames(transcript, players, me);
  let at = 0;
  const caption = el("p", { class: "rp-caption", "data-test": "replay-caption" });
  caption.setAttribute("role", "status");
  const counter = el("span", { class: "rp-counter", "data-test": "replay-counter" });
  const endsLine = el("p", { class: "sub rp-ends", "data-test": "replay-ends" });
  const line = el("div", { class: "rp-line", "data-test": "replay-line" });
  line.setAttribute("role", "group");
  line.setAttribute("aria-label", t("rp_line"));
  const seats = el("ul", { class: "rp-seats" });
  const button = (label, test, to) => {
    const b = el("button", { type: "button", class: "rp-btn", "data-test": test, onclick: () => go(to()) });
    b.textContent = label.text;
    b.setAttribute("aria-label", t(label.key));
    return b;
  };
  const controls = el("div", { class: "rp-controls" },
    button({ text: "«", key: "rp_first" }, "replay-first", () => 0),
    button({ text: "‹", key: "rp_prev" }, "replay-prev", () => at - 1),
    counter,
    button({ text: "›", key: "rp_next" }, "replay-next", () => at + 1),
    button({ text: "»", key: "rp_last" }, "replay-last", () => steps.length - 1));
  const head = el("div", { class: "rp-head" },
    el("h3", { text: `${t("rp_title")} · ${t("dealid")} ${String(transcript.deal_id).split("/").pop().replace(/\D/g, "")}` }));
  if (onClose) head.append(el("button", { type: "button", "data-test": "replay-close", text: t("rp_close"), onclick: onClose }));
  const viewer = el("section", { class: "replay", "data-test": "replay", tabIndex: 0 }, head, controls, caption, endsLine, line, seats);
  viewer.setAttribute("aria-label", t("rp_title"));
  viewer.addEventListener("keydown", (ev) => {
    const to = { ArrowLeft: at - 1, ArrowRight: at + 1, Home: 0, End: steps.length - 1 }[ev.key];
    if (to === undefined) return;
    ev.preventDefault();
    go(to);
  });

  function go(i) {
    at = Math.max(0, Math.min(steps.length - 1, i));
    const s = steps[at];
    viewer.dataset.step = String(at);
    viewer.dataset.kind = s.kind;
    counter.textContent = `${num(at + 1)} / ${num(steps.length)}`;
    caption.textContent = stepText(s, names);
    endsLine.textContent = s.ends ? `${t("rp_ends")}: ${s.ends[0]} · ${s.ends[1]}` : "";
    endsLine.dataset.ends = s.ends ? s.ends.join(",") : "";
    line.replaceChildren(...s.chain.map(([a, b]) => tileEl(a, b, a === b)));
    seats.replaceChildren(...s.hands.map((h, seat) => el("li", { class: seat === s.seat ? "rp-seat current" : "rp-seat" },
      el("span", { class: "rp-name", text: `${names[seat] || seat + 1} (${num(h.length)})` }),
      el("span", { class: "rp-tiles" }, ...h.map((x) => { const [a, b] = parseTile(x); return tileEl(a, b, false, true); })))));
    for (const b of controls.querySelectorAll("button")) {
      const back = b.dataset.test === "replay-first" || b.dataset.test === "replay-prev";
      b.disabled = back ? at === 0 : at === steps.length - 1;
    }
  }

  box.replaceChildren(viewer);
  go(0);
  viewer.focus();
  return { go, steps };
}
