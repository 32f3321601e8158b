// Domino tiles as inline SVG (no images, no libraries). Doubles can be drawn crosswise.
const NS = "http://www.w3.org/2000/svg";
const PIPS = {
  0: [], 1: [[1, 1]], 2: [[0, 0], [2, 2]], 3: [[0, 0], [1, 1], [2, 2]],
  4: [[0, 0], [0, 2], [2, 0], [2, 2]], 5: [[0, 0], [0, 2], [1, 1], [2, 0], [2, 2]],
  6: [[0, 0], [0, 1], [0, 2], [2, 0], [2, 1], [2, 2]],
  7: [[0, 0], [0, 1], [0, 2], [1, 1], [2, 0], [2, 1], [2, 2]],
  8: [[0, 0], [0, 1], [0, 2], [1, 0], [1, 2], [2, 0], [2, 1], [2, 2]],
  9: [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [2, 0], [2, 1], [2, 2]],
};

function half(svg, n, ox, oy) {
  for (const [r, c] of PIPS[n] || []) {
    const dot = document.createElementNS(NS, "circle");
    dot.setAttribute("cx", String(ox + 6 + c * 9));
    dot.setAttribute("cy", String(oy + 6 + r * 9));
    dot.setAttribute("r", "2.6");
    dot.setAttribute("class", "pip");
    svg.append(dot);
  }
}

// a, b: numbers. vertical: draw crosswise (a on top).
export function tileSvg(a, b, vertical = false) {
  const svg = document.createElementNS(NS, "svg");
  const w = vertical ? 30 : 60, h = vertical ? 60 : 30;
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("width", String(w));
  svg.setAttribute("height", String(h));
  svg.setAttribute("class", "tile-svg");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${a}-${b}`);
  const rect = document.createElementNS(NS, "rect");
  rect.setAttribute("x", "1"); rect.setAttribute("y", "1");
  rect.setAttribute("width", String(w - 2)); rect.setAttribute("height", String(h - 2));
  rect.setAttribute("rx", "4"); rect.setAttribute("class", "tile-face");
  svg.append(rect);
  const line = document.createElementNS(NS, "line");
  if (vertical) {
    line.setAttribute("x1", "4"); line.setAttribute("x2", "26"); line.setAttribute("y1", "30"); line.setAttribute("y2", "30");
  } else {
    line.setAttribute("x1", "30"); line.setAttribute("x2", "30"); line.setAttribute("y1", "4"); line.setAttribute("y2", "26");
  }
  line.setAttribute("class", "tile-line");
  svg.append(line);
  if (vertical) { half(svg, a, 0, 0); half(svg, b, 0, 30); } else { half(svg, a, 0, 0); half(svg, b, 30, 0); }
  return svg;
}

export function parseTile(s) {
  const [a, b] = String(s).split("-").map((x) => parseInt(x, 10));
  return [a, b];
}

// The chain as [[left, right], ...] in table order, from the plays of the hand.
export function buildChain(plays) {
  const chain = [];
  let L = null, R = null;
  for (const p of plays) {
    const [a, b] = parseTile(p.tile);
    if (chain.length === 0) {
      chain.push([a, b]);
      L = a; R = b;
    } else if (p.end === "left") {
      const other = a === L ? b : a;
      chain.unshift([other, L]);
      L = other;
    } else {
      const other = a === R ? b : a;
      chain.push([R, other]);
      R = other;
    }
  }
  return { chain, left: L, right: R };
}

// A seat's remaining tiles as small tile backs (at most 10 drawn, then "+n").
export function tileBacks(n) {
  const box = document.createElement("span");
  box.className = "backs";
  box.setAttribute("aria-hidden", "true");
  const shown = Math.min(n, 10);
  for (let i = 0; i < shown; i += 1) {
    const b = document.createElement("span");
    b.className = "back";
    box.append(b);
  }
  if (n > shown) box.append(document.createTextNode(`+${n - shown}`));
  return box;
}
