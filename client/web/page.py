"""The page a snapshot is: HTML, its style and its script in one text, the job's data inside it
as JSON. Whatever a rank sent (actor, file and function names, locals, output) reaches the page
only as JSON text and is put on it only as text (`textContent`, a canvas), so no name can be
markup or script there."""

from __future__ import annotations

import json
from typing import Any

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; } h3 { font-size: 1em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font: 12px/1.35 ui-monospace, monospace; }
table { border-collapse: collapse; font-size: 12px; } td, th { border: 1px solid #ccc; padding: 2px 6px; }
.legend span { display: inline-block; margin-right: 1em; } .selection { display: block; margin: 0.4em 0; } .swatch { width: 0.9em; height: 0.9em; }
canvas { border: 1px solid #ccc; image-rendering: pixelated; }
"""

SCRIPT = r"""
const data = JSON.parse(document.getElementById("job-data").textContent);
const COLOURS = {breakpoint: "#e0a800", interrupted: "#e0a800", "post-mortem": "#d33", running: "#3a3",
  lost: "#a3a", finished: "#36c", quit: "#3aa"};
function add(parent, tag, text) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  parent.appendChild(node);
  return node;
}
function cellOf(dims, rank) {
  if (dims[0] === "rank") return [Math.floor(rank.rank / 16), rank.rank % 16];
  if (dims[0] === "") return [0, rank.coords[dims[1]] || 0];
  return [rank.coords[dims[0]] || 0, rank.coords[dims[1]] || 0];
}
function selector(numbers) {
  // The shell's ranks(...) for these ranks: one run as start:stop, else the list of them (the
  // shell's selector takes a slice or a list, not both).
  const sorted = [...new Set(numbers)].sort((a, b) => a - b);
  const run = sorted.length > 2 && sorted[sorted.length - 1] - sorted[0] === sorted.length - 1;
  return run ? `ranks(${sorted[0]}:${sorted[sorted.length - 1] + 1})` : `ranks(${sorted.join(",")})`;
}
function actorWord(name) {
  return /\s/.test(name) ? `"${name}"` : name;
}
function drawMesh(parent, mesh, rows) {
  const size = 14, cells = mesh.ranks.map(r => [cellOf(mesh.dims, r), r]);
  const height = Math.max(...cells.map(([c]) => c[0])) + 1, width = Math.max(...cells.map(([c]) => c[1])) + 1;
  const canvas = add(parent, "canvas");
  canvas.width = width * size; canvas.height = height * size;
  const pen = canvas.getContext("2d"), at = new Map();
  let chosen = new Set(), from = null;
  const paint = () => {
    pen.clearRect(0, 0, canvas.width, canvas.height);
    for (const [[row, col], rank] of cells) {
      pen.fillStyle = COLOURS[rank.state] || "#999";
      pen.fillRect(col * size + 1, row * size + 1, size - 2, size - 2);
      if (chosen.has(rank.rank)) pen.strokeRect(col * size + 0.5, row * size + 0.5, size - 1, size - 1);
    }
  };
  for (const [[row, col], rank] of cells) at.set(row + "," + col, rank);
  const cellAt = event => [Math.floor(event.offsetY / size), Math.floor(event.offsetX / size)];
  canvas.addEventListener("mousemove", event => {
    const rank = at.get(cellAt(event).join(","));
    const row = rank && rows.find(r => r.actor === mesh.actor.split(":").pop() && r.rank === rank.rank);
    canvas.title = rank ? `rank ${rank.rank} ${rank.state}` + (row ? ` on ${row.host}, pid ${row.pid}, ${row.function}` : "") : "";
  });
  const shown = add(parent, "code");
  shown.className = "selection";
  canvas.addEventListener("mousedown", event => { from = cellAt(event); });
  canvas.addEventListener("mouseup", event => {
    if (from === null) return;
    const to = cellAt(event), picked = [];
    for (const [[row, col], rank] of cells) {
      if (row >= Math.min(from[0], to[0]) && row <= Math.max(from[0], to[0]) &&
          col >= Math.min(from[1], to[1]) && col <= Math.max(from[1], to[1])) picked.push(rank.rank);
    }
    from = null;
    chosen = new Set(picked);
    shown.textContent = picked.length ? `${actorWord(mesh.actor)} ${selector(picked)}` : "";
    paint();
  });
  paint();
  const legend = add(parent, "div");
  legend.className = "legend";
  for (const [state, count] of Object.entries(mesh.counts)) {
    const item = add(legend, "span");
    const swatch = add(item, "span");
    swatch.className = "swatch";
    swatch.style.background = COLOURS[state] || "#999";
    item.appendChild(document.createTextNode(` ${state} (${count})`));
  }
}
function table(parent, rows, columns) {
  const grid = add(parent, "table"), head = add(grid, "tr");
  for (const column of columns) add(head, "th", column);
  for (const row of rows) {
    const line = add(grid, "tr");
    for (const column of columns) add(line, "td", String(row[column] ?? ""));
  }
}
function readings(part, actor) {
  for (const [title, kind] of [["The hang story", "hang"], ["Process groups (collectives)", "collectives"],
                               ["Merged stacks, with the program frame's locals", "stacks"]]) {
    add(part, "h3", title);
    add(part, "pre", actor[kind]);
  }
  for (const failure of actor.failures) add(part, "p", failure);
}
function draw(view, data) {
  view.replaceChildren();
  add(view, "h1", data.taken ? `monarch-pdb snapshot, ${data.taken}` : "monarch-pdb: the job now");
  add(view, "h2", "Jobs");
  table(view, data.jobs, ["job", "processes", "sessions", "paused"]);
  for (const actor of data.actors) {
    const part = add(view, "section");
    add(part, "h2", actor.name);
    add(part, "h3", "Mesh");
    drawMesh(part, actor.mesh, data.ranks);
    if (actor.stacks !== undefined) {
      readings(part, actor);
      continue;
    }
    const read = add(part, "button", "Read their stacks and the hang story (stops nothing)");
    read.addEventListener("click", async () => {
      read.disabled = true;
      const answer = await fetch("actor?name=" + encodeURIComponent(actor.name));
      if (answer.ok) {
        read.remove();
        readings(part, await answer.json());
      } else {
        add(part, "p", await answer.text());
        read.disabled = false;
      }
    });
  }
  add(view, "h2", "Every rank");
  table(view, data.ranks, ["job", "actor", "rank", "state", "host", "pid", "function", "file", "line"]);
}
const view = add(document.body, "div");
draw(view, data);
if (data.live) {
  const news = add(document.body, "pre");
  news.className = "news";
  let due = null;
  const refresh = async () => {
    due = null;
    const answer = await fetch("state");
    if (answer.ok) draw(view, {live: true, ...await answer.json()});
  };
  const stream = new EventSource("news");
  stream.onmessage = event => {
    news.textContent = (JSON.parse(event.data) + "\n" + news.textContent).slice(0, 20000);
    if (due === null) due = setTimeout(refresh, 300);
  };
  stream.onerror = () => { news.textContent = "(the page lost its server; it tries again)\n" + news.textContent; };
}
"""


def embedded(data: Any) -> str:
    """`data` as JSON that no text in it can end its <script> element with."""
    return json.dumps(data, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(data: dict[str, Any], live: bool = False) -> str:
    """The whole page: one file with everything it shows inside it. `live`: a server's page,
    which is told of the broker's news (`news`) and then asks it for the job again (`state`)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        "<title>monarch-pdb</title>\n"
        f"<style>{STYLE}</style></head><body>\n"
        f'<script type="application/json" id="job-data">{embedded({**data, "live": live})}</script>\n'
        f"<script>{SCRIPT}</script>\n"
        "</body></html>\n"
    )
