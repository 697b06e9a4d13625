// alpstore ui: the live timeline. Polls for new checkpoints and appends rows built with
// createElement/textContent only (a label or trigger from the archive is never parsed as HTML).
"use strict";
(function () {
  const table = document.getElementById("timeline");
  if (!table || !table.dataset.poll) return;
  const body = document.getElementById("rows");
  const live = document.getElementById("live");
  let after = Number(table.dataset.after || "0");
  let busy = false;

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    return td;
  }
  function radio(name, id) {
    const td = document.createElement("td");
    const input = document.createElement("input");
    input.type = "radio";
    input.name = name;
    input.value = String(id);
    td.appendChild(input);
    return td;
  }
  function row(r) {
    const tr = document.createElement("tr");
    tr.className = "ck fresh" + (r.cut ? " cut" : "");
    tr.dataset.seq = String(r.seq);
    tr.dataset.ck = String(r.id);
    tr.appendChild(radio("a", r.id));
    tr.appendChild(radio("b", r.id));
    for (const v of [r.seq, r.turn, r.label, r.trigger, r.change, r.bytes, r.head]) {
      tr.appendChild(cell(String(v)));
    }
    const td = document.createElement("td");
    const a = document.createElement("a");
    a.href = r.href;
    a.className = "view";
    a.textContent = "view " + r.id;
    td.appendChild(a);
    tr.appendChild(td);
    return tr;
  }
  function marker(kind) {
    const tr = document.createElement("tr");
    tr.className = "marker";
    const td = cell(kind + " (reload for details)");
    td.colSpan = 10;
    tr.appendChild(td);
    return tr;
  }
  async function poll() {
    if (busy) return;
    busy = true;
    try {
      const res = await fetch(table.dataset.poll + "?after=" + after, { credentials: "same-origin" });
      if (!res.ok) throw new Error("HTTP " + res.status);
      const data = await res.json();
      for (const r of data.rows) {
        body.appendChild(row(r));
        for (const m of r.markers) body.appendChild(marker(m));
        after = Math.max(after, r.seq);
      }
      if (live) live.textContent = "live: last checked " + new Date().toLocaleTimeString();
    } catch (err) {
      if (live) live.textContent = "live: " + String(err.message || err);
    } finally {
      busy = false;
    }
  }
  setInterval(poll, 1000);
})();
