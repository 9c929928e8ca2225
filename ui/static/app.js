// plugreg's web UI: reads the HTTP API of the agent that served it, with
// the ACL token kept in this browser's localStorage. Registry data is put
// in the page as text only (textContent), never as HTML.
"use strict";

// Set once per page load: a test tells a live update from a reload by it.
window.plugregLoadedAt = Date.now();

const state = {
  token: localStorage.getItem("plugreg-token") || "",
  types: new Map(),      // type -> [newest instance per name]
  instances: new Map(),  // "type/name" -> recency list, for expanded names
  expanded: new Set(),   // "type/name"
  coverage: new Map(),   // type -> GET /v1/coverage/{type}
  denied: false,
};

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

function headers() {
  return state.token ? { "X-Plugreg-Token": state.token } : {};
}

function banner(msg) {
  const b = $("#banner");
  b.hidden = !msg;
  b.textContent = msg || "";
}

// api GETs path; 429 (autopilot: unhealthy) is an answer, not a failure.
async function api(path) {
  const resp = await fetch(path, { headers: headers(), cache: "no-store" });
  if (resp.status === 403) {
    state.denied = true;
    let code = "permission_denied";
    try { code = (await resp.json()).Code || code; } catch (e) { /* keep */ }
    banner(`Permission denied (${code}): enter an ACL token that may read, above.`);
    throw new Error("denied");
  }
  if (!resp.ok && resp.status !== 429) {
    let msg = resp.statusText;
    try { msg = (await resp.json()).Error || msg; } catch (e) { /* keep */ }
    throw new Error(`${path}: ${resp.status} ${msg}`);
  }
  return resp.json();
}

function endpoint(p) {
  const c = p.ConnectionInfo || {};
  return c.SocketPath || c.Address || "";
}

// ---- members and health ----

async function loadMembers() {
  const members = await api("/v1/members");
  let health = null;
  try { health = await api("/v1/operator/autopilot/health"); } catch (e) { if (state.denied) throw e; }
  const byID = new Map(((health && health.Servers) || []).map((s) => [s.ID, s]));
  const tbody = $("#members tbody");
  tbody.replaceChildren();
  members.sort((a, b) => (a.Role === b.Role ? a.Name.localeCompare(b.Name) : a.Role === "server" ? -1 : 1));
  for (const m of members) {
    const h = byID.get(m.Name);
    const raft = m.Role !== "server" ? "-" : m.Leader ? "leader" : m.Voter ? "follower" : "non-voter";
    const healthy = h ? el("span", { class: h.Healthy ? "yes" : "no" }, h.Healthy ? "yes" : "no") : "-";
    tbody.append(el("tr", { "data-node": m.Name, "data-raft": raft },
      el("td", {}, m.Name), el("td", {}, m.Role), el("td", {}, m.Status), el("td", {}, raft), el("td", {}, healthy),
      el("td", {}, h ? h.LastContact || "-" : "-"), el("td", {}, h ? h.LastIndex : "-"), el("td", {}, h ? h.IndexLag : "-"),
      el("td", {}, m.HTTPAddr || "")));
  }
  const pill = $("#cluster-health");
  if (health) {
    pill.className = "pill " + (health.Healthy ? "ok" : "bad");
    pill.textContent = (health.Healthy ? "healthy" : "unhealthy") + `, failure tolerance ${health.FailureTolerance}`;
  } else {
    pill.className = "pill";
    pill.textContent = "";
  }
  const nodes = new Set(members.map((m) => m.Name));
  for (const list of state.types.values()) for (const p of list) if (p.NodeID) nodes.add(p.NodeID);
  fillSelect($("#filter-node"), [...nodes].sort(), "all nodes");
}

async function loadSelf() {
  try {
    const self = await api("/v1/agent/self");
    $("#agent").textContent = `${self.Config.NodeID} (${self.Config.Role}, ${self.Config.Version})`;
  } catch (e) { /* the members table says what is wrong */ }
}

// ---- plugins ----

async function loadType(type) {
  const list = await api("/v1/plugins/" + encodeURIComponent(type));
  if (list.length) state.types.set(type, list);
  else state.types.delete(type);
  for (const key of state.expanded) {
    if (key.startsWith(type + "/")) await loadInstances(key);
  }
}

async function loadInstances(key) {
  const [type, name] = key.split("/");
  try {
    state.instances.set(key, await api(`/v1/plugins/${encodeURIComponent(type)}/${encodeURIComponent(name)}`));
  } catch (e) {
    if (state.denied) throw e;
    state.instances.delete(key); // gone: not found
  }
}

async function loadPlugins() {
  const types = await api("/v1/types");
  for (const t of [...state.types.keys()]) if (!types.includes(t)) state.types.delete(t);
  for (const t of types) await loadType(t);
  render();
}

function fillSelect(sel, values, all) {
  const cur = sel.value;
  sel.replaceChildren(el("option", { value: "" }, all), ...values.map((v) => el("option", { value: v }, v)));
  if (values.includes(cur)) sel.value = cur;
}

function matches(p, q, type, node) {
  if (type && p.Type !== type) return false;
  if (node && p.NodeID !== node) return false;
  if (!q) return true;
  return [p.Type, p.Name, p.NodeID, p.AllocID].some((s) => (s || "").toLowerCase().includes(q));
}

// health is an instance's health cell: passing, or suspect with who said
// so, why, and when it was last seen passing (in the tooltip).
function health(p) {
  const h = p.Health;
  if (!h) return el("td", { class: "health passing" }, "passing");
  return el("td", { class: "health suspect", title: `${h.Reason || ""} (last seen passing ${h.LastSeen})` }, `suspect (${h.Check})`);
}

function render() {
  const q = $("#filter").value.trim().toLowerCase();
  const type = $("#filter-type").value;
  const node = $("#filter-node").value;
  fillSelect($("#filter-type"), [...state.types.keys()].sort(), "all types");
  const tbody = $("#plugins tbody");
  tbody.replaceChildren();
  let shown = 0, total = 0;
  for (const t of [...state.types.keys()].sort()) {
    for (const p of state.types.get(t)) {
      total++;
      const key = `${p.Type}/${p.Name}`;
      const list = state.instances.get(key);
      // A name shows when it or any of its instances matches.
      if (!matches(p, q, type, node) && !(list && list.some((i) => matches(i, q, type, node)))) continue;
      shown++;
      const open = state.expanded.has(key);
      const row = el("tr", { class: "name-row", "data-type": p.Type, "data-name": p.Name, "data-alloc": p.AllocID, title: "show every instance, newest first" },
        el("td", {}, p.Type), el("td", {}, (open ? "▾ " : "▸ ") + p.Name), el("td", {}, p.AllocID), el("td", {}, p.NodeID),
        el("td", {}, p.Version), health(p), el("td", {}, endpoint(p)), el("td", {}, p.CreateIndex), el("td", {}, p.ModifyIndex),
        el("td", {}, list ? list.length : ""));
      row.addEventListener("click", () => toggle(key));
      tbody.append(row);
      if (open && list) {
        for (const i of list) {
          tbody.append(el("tr", { class: "instance-row", "data-type": i.Type, "data-name": i.Name, "data-alloc": i.AllocID },
            el("td", {}, ""), el("td", {}, ""), el("td", {}, i.AllocID), el("td", {}, i.NodeID), el("td", {}, i.Version),
            health(i), el("td", {}, endpoint(i)), el("td", {}, i.CreateIndex), el("td", {}, i.ModifyIndex), el("td", {}, "")));
        }
      }
    }
  }
  $("#plugin-count").textContent = shown === total ? `${total} names` : `${shown} of ${total} names`;
}

async function toggle(key) {
  if (state.expanded.has(key)) {
    state.expanded.delete(key);
  } else {
    state.expanded.add(key);
    await loadInstances(key);
  }
  render();
}

// ---- coverage ----

// loadCoverage reads the coverage of every type shown (docs/api.md,
// Coverage): after the plugins change, and with the members, since a node
// joining or failing changes it too.
async function loadCoverage() {
  const types = [...state.types.keys()].sort();
  for (const t of [...state.coverage.keys()]) if (!state.types.has(t)) state.coverage.delete(t);
  for (const t of types) {
    try {
      state.coverage.set(t, await api("/v1/coverage/" + encodeURIComponent(t)));
    } catch (e) {
      if (state.denied) throw e;
      state.coverage.delete(t); // an older server: no coverage
    }
  }
  renderCoverage();
}

function renderCoverage() {
  const tbody = $("#coverage tbody");
  tbody.replaceChildren();
  for (const t of [...state.coverage.keys()].sort()) {
    const c = state.coverage.get(t);
    const cell = (st, nodes) => el("td", { "data-state": st, class: nodes.length ? "some" : "" },
      nodes.length ? `${nodes.length}: ${nodes.join(", ")}` : "0");
    tbody.append(el("tr", { "data-type": t },
      el("td", {}, t), el("td", {}, c.Nodes), cell("covered", c.Covered), cell("missing", c.Missing),
      cell("suspect", c.Suspect), cell("orphaned", c.Orphaned)));
  }
}

// ---- live events ----

const stream = { complete: 0, partial: 0, seenAtPartial: new Set(), backoff: 500, ctrl: null, dirty: new Set() };

function eventKey(ev) {
  const p = ev.Info || {};
  return `${ev.EventType}/${p.Type}/${p.Name}/${p.AllocID}`;
}

function streamState(text, cls) {
  const s = $("#stream-state");
  s.textContent = text;
  s.className = "pill " + (cls || "");
}

function showEvent(ev) {
  const p = ev.Info || {};
  const tbody = $("#events tbody");
  tbody.prepend(el("tr", { class: "fresh", "data-index": ev.Index, "data-event": ev.EventType, "data-type": p.Type || "", "data-name": p.Name || "", "data-alloc": p.AllocID || "" },
    el("td", {}, ev.Index), el("td", {}, ev.EventType), el("td", {}, p.Type || ""), el("td", {}, p.Name || ""),
    el("td", {}, p.AllocID || ""), el("td", {}, p.NodeID || "")));
  while (tbody.children.length > 200) tbody.lastChild.remove();
}

let refreshTimer = null;
// refreshSoon reloads the types the events touched, at most every 200 ms.
function refreshSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    const types = [...stream.dirty];
    stream.dirty.clear();
    try {
      if (types.includes("*")) await loadPlugins();
      else { for (const t of types) await loadType(t); render(); }
      await loadCoverage();
    } catch (e) { if (!state.denied) banner(e.message); }
  }, 200);
}

function handle(ev) {
  if (ev.EventType === "heartbeat") {
    stream.complete = Math.max(stream.complete, ev.Index);
  } else if (ev.EventType === "reset") {
    // The whole state at ev.Index: reload everything.
    stream.complete = ev.Index;
    stream.dirty.add("*");
    showEvent(ev);
    refreshSoon();
  } else {
    // Events of one index come together; the index before is complete.
    if (ev.Index > stream.partial) {
      stream.complete = Math.max(stream.complete, stream.partial);
      stream.partial = ev.Index;
      stream.seenAtPartial = new Set();
    }
    const k = eventKey(ev);
    if (ev.Index <= stream.complete || stream.seenAtPartial.has(k)) return; // a resume's repeat
    stream.seenAtPartial.add(k);
    showEvent(ev);
    if (ev.Info) stream.dirty.add(ev.Info.Type);
    refreshSoon();
  }
  $("#stream-index").textContent = `at index ${Math.max(stream.complete, stream.partial)}`;
}

// watch streams /v1/events from the last complete index, and resumes from
// there after any break, as the Go client and the CLI do.
async function watch() {
  for (;;) {
    stream.ctrl = new AbortController();
    try {
      const resp = await fetch(`/v1/events?index=${stream.complete}`, { headers: headers(), signal: stream.ctrl.signal, cache: "no-store" });
      if (resp.status === 403) {
        state.denied = true;
        streamState("no permission", "bad");
        banner("Permission denied: enter an ACL token that may read, above.");
        return;
      }
      if (!resp.ok) throw new Error(`events: ${resp.status}`);
      streamState("live", "ok");
      stream.backoff = 500;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line) handle(JSON.parse(line));
        }
      }
    } catch (e) {
      if (e.name === "AbortError") return;
    }
    streamState("reconnecting", "warn");
    await new Promise((r) => setTimeout(r, stream.backoff));
    stream.backoff = Math.min(stream.backoff * 2, 10000);
  }
}

// ---- start ----

async function refreshAll() {
  try {
    await loadMembers();
    await loadPlugins();
    await loadCoverage();
    if (!state.denied) banner("");
  } catch (e) {
    if (!state.denied) banner(e.message);
  }
}

function start() {
  state.denied = false;
  if (stream.ctrl) stream.ctrl.abort();
  stream.complete = 0;
  stream.partial = 0;
  $("#events tbody").replaceChildren();
  loadSelf();
  refreshAll().then(() => { if (!state.denied) watch(); });
}

document.addEventListener("DOMContentLoaded", () => {
  $("#token").value = state.token;
  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("#token").value.trim();
    localStorage.setItem("plugreg-token", state.token);
    start();
  });
  $("#token-clear").addEventListener("click", () => {
    state.token = "";
    $("#token").value = "";
    localStorage.removeItem("plugreg-token");
    start();
  });
  for (const id of ["#filter", "#filter-type", "#filter-node"]) $(id).addEventListener("input", render);
  setInterval(() => { if (!state.denied) loadMembers().then(loadCoverage).catch(() => {}); }, 5000);
  start();
});
