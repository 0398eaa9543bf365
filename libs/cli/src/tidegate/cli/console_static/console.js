// tidegate console: renders the snapshots and decisions /events sends. Plain DOM, no
// dependency; every text from the bus goes through textContent, never innerHTML.
"use strict";

const KEPT = 300;
let decisions = [];
let selected = null; // path of the domain whose gangs are listed

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key === "title") node.title = value;
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function gpuCells(node) {
  const cells = el("div", { class: "gpus" });
  const parts = node.ready
    ? [["running", node.running], ["released", node.released], ["reserved", node.reserved], ["free", node.free]]
    : [["notready", node.gpus]];
  for (const [kind, count] of parts) {
    for (let i = 0; i < count; i++) cells.append(el("div", { class: "gpu " + kind }));
  }
  return cells;
}

function clock(iso) {
  return iso ? iso.slice(11, 16) + " UTC" : "-";
}

function renderNode(node, parent) {
  const prefix = parent ? parent + "-" : "";
  const short = prefix && node.name.startsWith(prefix) ? node.name.slice(prefix.length) : node.name;
  const state = node.ready ? (node.schedulable ? "" : " (cordoned)") : " NotReady";
  const held = node.reserved_for ? `; held for ${node.reserved_for} (reservation)` : "";
  return el("div", {
      class: "node" + (node.ready ? "" : " notready") + (node.reserved_for ? " held" : ""),
      "data-node": node.name, "data-gpus": node.gpus, "data-running": node.running,
      "data-released": node.released, "data-reserved": node.reserved, "data-free": node.free,
      "data-ready": node.ready, "data-reserved-for": node.reserved_for,
      title: `${node.name}${state}: ${node.gpus} GPUs, ${node.running} running, ${node.released} released not running, ${node.reserved} reserved, ${node.free} free${held}`,
    },
    el("div", { class: "name" }, short),
    el("div", { class: "card" }, node.card || "no GPU model"),
    gpuCells(node));
}

function sumNodes(domain) {
  let gpus = 0, used = 0;
  for (const n of domain.nodes || []) { gpus += n.gpus; used += n.gpus - n.free; }
  for (const c of domain.children) { const [g, u] = sumNodes(c); gpus += g; used += u; }
  return [gpus, used];
}

function renderDomain(domain) {
  const [gpus, used] = sumNodes(domain);
  const path = domain.path.join("/");
  const held = domain.reservation;
  const box = el("div", {
    class: "domain" + (selected === path ? " selected" : "") + (held ? " reserved-domain" : ""),
    "data-level": domain.level, "data-path": path,
    "data-reserved-for": held ? held.workload : null,
    title: held ? held.message : null,
  });
  const title = el("div", { class: "title" }, domain.name, el("small", {}, `${domain.level} · ${used}/${gpus} GPUs in use`));
  title.addEventListener("click", () => selectDomain(domain));
  box.append(title);
  if (held) {
    const waits = held.waits_for.length ? ` when ${held.waits_for.join(", ")} end` : "";
    box.append(el("div", { class: "reservation", "data-expected-start": held.expected_start },
      `reserved for ${held.workload}`, el("span", { class: "muted" }, ` · expected start ${clock(held.expected_start)}${waits}`)));
  }
  if (domain.children.length) box.append(el("div", { class: "children" }, ...domain.children.map(renderDomain)));
  if (domain.nodes) box.append(el("div", { class: "nodes" }, ...domain.nodes.map((n) => renderNode(n, domain.name))));
  return box;
}

function renderTopology(map) {
  document.getElementById("topology-name").textContent =
    map.topology ? `${map.topology}: ${map.levels.join(" → ")} → node` : "(no Topology on the bus: nodes only)";
  const root = document.getElementById("topology");
  const parts = map.root.children.map(renderDomain);
  if (map.root.nodes) parts.push(el("div", { class: "nodes" }, ...map.root.nodes.map((n) => renderNode(n, null))));
  root.replaceChildren(...parts);
}

async function selectDomain(domain) {
  selected = domain.path.join("/");
  document.querySelectorAll(".domain.selected").forEach((d) => d.classList.remove("selected"));
  const box = document.querySelector(`.domain[data-path="${CSS.escape(selected)}"]`);
  if (box) box.classList.add("selected");
  await loadDomain();
}

async function loadDomain() {
  if (selected === null) return;
  const query = selected.split("/").map((p) => "path=" + encodeURIComponent(p)).join("&");
  const response = await fetch("/api/domain?" + query);
  if (!response.ok) return;
  const answer = await response.json();
  const panel = document.getElementById("domain");
  panel.hidden = false;
  panel.setAttribute("data-path", selected);
  document.getElementById("domain-title").textContent = `Gangs in ${selected} (${answer.gangs.length})`;
  const rows = answer.gangs.map((g) => el("tr", { "data-workload": g.workload },
    el("td", {}, g.workload), el("td", {}, g.state + (g.reason ? ` (${g.reason})` : "")),
    el("td", {}, g.queue || "-"), el("td", {}, g.pods),
    el("td", { class: "muted" }, Object.entries(g.nodes).map(([n, c]) => `${n}×${c}`).join(" "))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { class: "muted", colSpan: 5 }, "nothing holds GPUs here")));
  document.querySelector("#domain-gangs tbody").replaceChildren(...rows);
}

function amount(resource, value) {
  if (resource === "memory") return (value / 2 ** 30).toFixed(0) + "Gi";
  if (resource === "cpu") return (value / 1000).toString();
  return String(value);
}

function usageCell(queue) {
  const cell = el("td");
  const names = new Set([...Object.keys(queue.usage), ...Object.keys(queue.quota)]);
  for (const name of [...names].sort()) {
    const used = queue.usage[name] || 0;
    const quota = queue.quota[name];
    const line = el("div", {}, `${name} ${amount(name, used)}` + (quota !== undefined ? ` / ${amount(name, quota)}` : ""));
    if (quota) {
      const share = Math.min(used / quota, 1);
      const fill = el("div", { class: used > quota ? "over" : "" });
      fill.style.width = `${share * 100}%`;
      line.append(el("div", { class: "bar" }, fill));
    }
    cell.append(line);
  }
  const cards = new Set([...Object.keys(queue.card_usage), ...Object.keys(queue.card_quota)]);
  for (const card of [...cards].sort()) {
    const quota = queue.card_quota[card];
    cell.append(el("div", { class: "muted" }, `${card} ${queue.card_usage[card] || 0}` + (quota !== undefined ? ` / ${quota}` : "")));
  }
  if (!cell.childNodes.length) cell.append(el("span", { class: "muted" }, "-"));
  return cell;
}

function renderQueues(queues) {
  const rows = queues.map((q) => {
    const reasons = Object.entries(q.pending).sort().map(([r, n]) => el("div", {}, el("span", { class: "reason" }, r), ` ${n}`));
    const name = q.queue || "(no queue)";
    return el("tr", { "data-queue": q.queue },
      el("td", {}, name, q.exists ? el("div", { class: "muted" }, `priority ${q.priority}${q.reclaimable ? ", reclaimable" : ""}`)
                               : el("div", { class: "reason" }, "does not exist")),
      usageCell(q), el("td", {}, q.admitted), el("td", {}, ...(reasons.length ? reasons : ["0"])));
  });
  document.querySelector("#queues tbody").replaceChildren(...rows);
}

function treeRows(node, depth, rows) {
  const dims = node.dims.length ? node.dims : [null];
  dims.forEach((d, i) => {
    const name = i === 0
      ? el("td", { style: "" }, "\u00a0".repeat(depth * 3) + node.name, el("span", { class: "muted" }, ` ${node.kind}`),
           node.invalid ? el("div", { class: "reason" }, node.invalid) : null)
      : el("td");
    rows.push(el("tr", { "data-node": `${node.kind}/${node.name}` }, name,
      el("td", {}, d ? `${d.dim} ${d.used}` + (d.nominal !== null ? ` / ${d.nominal}` : "") : "-"),
      el("td", { class: d && d.borrowing ? "reason" : "muted", "data-borrowed": d ? d.borrowed : null }, d ? d.borrowed : ""),
      el("td", { class: d && d.lending ? "lent" : "muted", "data-lent": d ? d.lent : null,
                 title: d ? `could lend ${d.lendable}` : null }, d ? d.lent : ""),
      el("td", { class: "muted" }, d ? d.ceiling : "")));
  });
  for (const child of node.children) treeRows(child, depth + 1, rows);
}

function renderTree(tree) {
  document.getElementById("tree-section").hidden = !tree.length;
  const rows = [];
  for (const root of tree) treeRows(root, 0, rows);
  document.querySelector("#tree tbody").replaceChildren(...rows);
}

const opened = new Set(); // workloads whose explain answer is shown

async function showExplain(key, cell) {
  const response = await fetch("/api/explain?workload=" + encodeURIComponent(key));
  const text = response.ok ? (await response.json()).text : await response.text();
  cell.replaceChildren(el("pre", { class: "explain" }, text));
}

function renderPending(pending) {
  document.getElementById("pending-count").textContent = `(${pending.length})`;
  const rows = [];
  for (const p of pending) {
    const trace = p.trace_url ? el("a", { href: p.trace_url, target: "_blank", rel: "noopener" }, "trace")
                              : (p.trace_id ? el("span", { class: "muted", title: p.trace_id }, "trace " + p.trace_id.slice(0, 8)) : null);
    const button = el("button", { class: "explain" }, opened.has(p.workload) ? "hide" : "explain");
    const row = el("tr", { "data-workload": p.workload, "data-reason": p.reason || "" },
      el("td", {}, p.workload, el("div", { class: "muted" }, `${p.pods} pods, ${p.gpus} GPUs`)),
      el("td", {}, p.queue || "-"),
      el("td", {}, el("span", { class: "reason" }, p.reason || "-")),
      el("td", {}, p.message, p.reservation ? el("div", { class: "reservation" }, p.reservation) : null,
        p.since ? el("div", { class: "muted" }, "since " + p.since) : null),
      el("td", {}, button, " ", trace));
    const detail = el("tr", { class: "detail" }, el("td", { colSpan: 5 }));
    detail.hidden = !opened.has(p.workload);
    button.addEventListener("click", () => {
      if (opened.has(p.workload)) opened.delete(p.workload); else opened.add(p.workload);
      detail.hidden = !opened.has(p.workload);
      button.textContent = opened.has(p.workload) ? "hide" : "explain";
      if (opened.has(p.workload)) showExplain(p.workload, detail.firstChild);
    });
    if (opened.has(p.workload)) showExplain(p.workload, detail.firstChild);
    rows.push(row, detail);
  }
  if (!rows.length) rows.push(el("tr", {}, el("td", { class: "muted", colSpan: 5 }, "nothing waits")));
  document.querySelector("#pending tbody").replaceChildren(...rows);
}

function renderTotals(totals) {
  document.getElementById("totals").replaceChildren(
    el("span", {}, `${totals.gpus} GPUs`), el("span", {}, `${totals.running} running`),
    el("span", {}, `${totals.released} released`), el("span", {}, `${totals.reserved} reserved`),
    el("span", {}, `${totals.free} free`), ...(totals.not_ready ? [el("span", { class: "reason" }, `${totals.not_ready} NotReady`)] : []));
}

function renderReservations(reservations) {
  document.getElementById("reservations-section").hidden = !reservations.length;
  const rows = reservations.map((r) => el("tr", { "data-workload": r.workload },
    el("td", {}, r.workload, el("div", { class: "muted" }, r.queue)),
    el("td", {}, r.where, el("div", { class: "muted" }, `${r.nodes.length} nodes`)),
    el("td", {}, clock(r.expected_start), r.overdue.length ? el("div", { class: "reason" }, `${r.overdue.join(", ")} overdue`) : null),
    el("td", { class: "muted" }, r.waits_for.join(", ") || "-")));
  document.querySelector("#reservations tbody").replaceChildren(...rows);
}

function renderSnapshot(snapshot) {
  document.getElementById("cluster").textContent = snapshot.cluster;
  renderTotals(snapshot.totals);
  renderTopology(snapshot.map);
  renderQueues(snapshot.queues);
  renderTree(snapshot.tree || []);
  renderReservations(snapshot.reservations || []);
  renderPending(snapshot.pending);
  loadDomain();
}

function shown(decision) {
  const box = document.querySelector(`.filters input[data-kind="${decision.kind}"]`);
  if (box && !box.checked) return false;
  const text = document.getElementById("stream-filter").value.trim().toLowerCase();
  if (!text) return true;
  return [decision.workload, decision.queue, decision.text, decision.reason, ...(decision.victims || [])]
    .some((v) => v && String(v).toLowerCase().includes(text));
}

function decisionItem(d) {
  return el("li", { class: "k-" + d.kind, "data-kind": d.kind, "data-workload": d.workload, "data-seq": d.seq },
    el("span", { class: "at" }, d.at.slice(11)), el("span", { class: "kind" }, d.kind),
    d.workload, d.queue ? el("span", { class: "muted" }, ` [${d.queue}]`) : null,
    d.reason ? el("span", { class: "reason" }, " " + d.reason) : null, d.text ? ` — ${d.text}` : null);
}

function renderStream() {
  const items = decisions.filter(shown).slice(-KEPT).reverse().map(decisionItem);
  document.getElementById("stream").replaceChildren(...items);
}

function addDecision(d) {
  decisions.push(d);
  if (decisions.length > 2 * KEPT) decisions = decisions.slice(-KEPT);
  if (shown(d)) {
    const list = document.getElementById("stream");
    list.prepend(decisionItem(d));
    while (list.childNodes.length > KEPT) list.lastChild.remove();
  }
}

function status(text, kind) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = "status " + kind;
}

function start() {
  document.querySelectorAll(".filters input").forEach((i) => i.addEventListener("input", renderStream));
  const events = new EventSource("/events");
  events.addEventListener("open", () => status("live", "live"));
  events.addEventListener("error", () => status("reconnecting", "down"));
  events.addEventListener("decisions", (e) => { decisions = JSON.parse(e.data); renderStream(); });
  events.addEventListener("snapshot", (e) => renderSnapshot(JSON.parse(e.data)));
  events.addEventListener("decision", (e) => addDecision(JSON.parse(e.data)));
}

start();
