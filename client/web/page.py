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
.legend span { display: inline-block; margin-right: 1em; } .swatch { width: 0.9em; height: 0.9em; }
canvas { border: 1px solid #ccc; image-rendering: pixelated; }
"""

SCRIPT = """
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
function drawMesh(parent, mesh, rows) {
  const size = 14, cells = mesh.ranks.map(r => [cellOf(mesh.dims, r), r]);
  const height = Math.max(...cells.map(([c]) => c[0])) + 1, width = Math.max(...cells.map(([c]) => c[1])) + 1;
  const canvas = add(parent, "canvas");
  canvas.width = width * size; canvas.height = height * size;
  const pen = canvas.getContext("2d"), at = new Map();
  for (const [[row, col], rank] of cells) {
    pen.fillStyle = COLOURS[rank.state] || "#999";
    pen.fillRect(col * size + 1, row * size + 1, size - 2, size - 2);
    at.set(row + "," + col, rank);
  }
  canvas.addEventListener("mousemove", event => {
    const rank = at.get(Math.floor(event.offsetY / size) + "," + Math.floor(event.offsetX / size));
    const row = rank && rows.find(r => r.actor === mesh.actor.split(":").pop() && r.rank === rank.rank);
    canvas.title = rank ? `rank ${rank.rank} ${rank.state}` + (row ? ` on ${row.host}, pid ${row.pid}, ${row.function}` : "") : "";
  });
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
add(document.body, "h1", `monarch-pdb snapshot, ${data.taken}`);
add(document.body, "h2", "Jobs");
table(document.body, data.jobs, ["job", "processes", "sessions", "paused"]);
for (const actor of data.actors) {
  const part = add(document.body, "section");
  add(part, "h2", actor.name);
  add(part, "h3", "Mesh");
  drawMesh(part, actor.mesh, data.ranks);
  add(part, "h3", "The hang story");
  add(part, "pre", actor.hang);
  add(part, "h3", "Process groups (collectives)");
  add(part, "pre", actor.collectives);
  add(part, "h3", "Merged stacks, with the program frame's locals");
  add(part, "pre", actor.stacks);
  for (const failure of actor.failures) add(part, "p", failure);
}
add(document.body, "h2", "Every rank");
table(document.body, data.ranks, ["job", "actor", "rank", "state", "host", "pid", "function", "file", "line"]);
"""


def embedded(data: Any) -> str:
    """`data` as JSON that no text in it can end its <script> element with."""
    return json.dumps(data, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(data: Any) -> str:
    """The whole page: one file with everything it shows inside it."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        "<title>monarch-pdb snapshot</title>\n"
        f"<style>{STYLE}</style></head><body>\n"
        f'<script type="application/json" id="job-data">{embedded(data)}</script>\n'
        f"<script>{SCRIPT}</script>\n"
        "</body></html>\n"
    )
