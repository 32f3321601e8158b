// The line of play as a snake that turns inside a box: a pure layout function (no DOM).
//
// Units: a tile is 2 x 1 (long x short). Rows run left to right, then right to left, and so
// on; doubles lie crosswise (1 along the row, 2 across). At a row's end the next tile turns
// down (drawn upright under the row's last tile) and the next row starts from it. A double
// may overhang the row by one unit so that a corner is never a double (doubles always lie
// crosswise). The whole snake is then scaled to fit the box, so both ends are always inside.

const MIN_COLS = 6;
const MAX_COLS = 40;

function place(chain, cols) {
  const tiles = [];
  let dir = 1;          // +1: rightwards, -1: leftwards
  let x = 0;            // where the next tile attaches along the row (its near edge)
  let cy = 0;           // the row's centre line
  let last = null;
  for (let i = 0; i < chain.length; i += 1) {
    const [a, b] = chain[i];
    const dbl = a === b;
    const len = dbl ? 1 : 2;
    const far = x + dir * len;
    // A double may overhang by one; a normal tile must fit in [0, cols].
    const fits = dbl ? far >= -1 && far <= cols + 1 : far >= 0 && far <= cols;
    if (fits || last === null) {
      const x0 = Math.min(x, far);
      const t = dbl
        ? { a, b, x: x0, y: cy - 1, w: 1, h: 2, dir: "v" }
        : { a, b, x: x0, y: cy - 0.5, w: 2, h: 1, dir: dir > 0 ? "r" : "l" };
      tiles.push(t);
      x = far;
      last = t;
      continue;
    }
    // Turn: this (normal) tile goes down under the outer unit of the row's last tile.
    const colX = dir > 0 ? last.x + last.w - 1 : last.x;
    const top = last.y + last.h;
    const t = { a, b, x: colX, y: top, w: 1, h: 2, dir: "d" };
    tiles.push(t);
    cy = top + 1.5;
    dir = -dir;
    x = dir > 0 ? colX + 1 : colX;
    last = t;
  }
  return tiles;
}

function bounds(tiles) {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const t of tiles) {
    x0 = Math.min(x0, t.x); y0 = Math.min(y0, t.y);
    x1 = Math.max(x1, t.x + t.w); y1 = Math.max(y1, t.y + t.h);
  }
  return { x0, y0, x1, y1 };
}

// chain: [[left, right], ...] in table order. box: {width, height} in px; maxUnit caps the
// tile size (px per unit) on short chains. Returns the tiles in px, with `end` marks on the
// two open ends ({side: "left"|"right", value, cx, cy} at the centre of the open half).
export function layoutSnake(chain, box, maxUnit = 28) {
  if (!chain.length) return { unit: maxUnit, width: 0, height: 0, tiles: [], ends: [] };
  let best = null;
  for (let cols = MIN_COLS; cols <= MAX_COLS; cols += 1) {
    const tiles = place(chain, cols);
    const b = bounds(tiles);
    const w = b.x1 - b.x0, h = b.y1 - b.y0;
    const unit = Math.min(maxUnit, box.width / w, box.height / h);
    // Ties go to the wider layout: fewer turns.
    if (!best || unit >= best.unit - 1e-9) best = { unit, tiles, b, w, h };
    if (w < cols - 2 && cols > MIN_COLS) break; // the chain no longer fills a row
  }
  const { unit, b } = best;
  const offX = (box.width - best.w * unit) / 2, offY = (box.height - best.h * unit) / 2;
  const tiles = best.tiles.map((t) => ({
    a: t.a, b: t.b, dir: t.dir,
    x: offX + (t.x - b.x0) * unit, y: offY + (t.y - b.y0) * unit, w: t.w * unit, h: t.h * unit,
  }));
  return { unit, width: box.width, height: box.height, tiles, ends: [endMark(tiles[0], "left"), endMark(tiles[tiles.length - 1], "right")] };
}

// The open half of an end tile: the left end is the first tile's first value, the right end
// the last tile's second value. Which half is "first" depends on the direction drawn.
function endMark(t, side) {
  const value = side === "left" ? t.a : t.b;
  let cx = t.x + t.w / 2, cy = t.y + t.h / 2;
  const firstHalf = side === "left";
  if (t.dir === "r") cx = firstHalf ? t.x + t.w / 4 : t.x + (3 * t.w) / 4;
  else if (t.dir === "l") cx = firstHalf ? t.x + (3 * t.w) / 4 : t.x + t.w / 4;
  else if (t.dir === "d") cy = firstHalf ? t.y + t.h / 4 : t.y + (3 * t.h) / 4;
  return { side, value, cx, cy };
}

// Overlap check used by the tests (and cheap enough to run in development).
export function overlaps(tiles, eps = 1e-6) {
  for (let i = 0; i < tiles.length; i += 1) {
    for (let j = i + 1; j < tiles.length; j += 1) {
      const p = tiles[i], q = tiles[j];
      if (p.x + p.w - eps > q.x && q.x + q.w - eps > p.x && p.y + p.h - eps > q.y && q.y + q.h - eps > p.y) return [i, j];
    }
  }
  return null;
}
