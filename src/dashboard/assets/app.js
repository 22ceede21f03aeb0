// sluice dashboard: plain DOM, no framework. Every value from the server is put into the page as
// text (textContent, attributes set one by one), never parsed as HTML: names, labels and messages
// are user input.
"use strict";

const $ = (id) => document.getElementById(id);
let state = null;
let history = {};
let me = null;
let stream = null;
// The last 100 live updates: [received (ms since the epoch), JSON parse ms, drawing ms]. Read by
// the load benchmark (tools/src/bin/dashboard_load.rs) to tell where a live update's time goes.
const timings = [];
window.sluiceTimings = timings;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function table(headers, rows, testid) {
  const head = el("tr", {}, ...headers.map((h) => el("th", {}, h)));
  return el("table", { "data-testid": testid }, el("thead", {}, head), el("tbody", {}, ...rows));
}

// Brings the rows of `tbody` to `items`, in order, rebuilding only the rows whose content changed
// (their signature) and moving only those out of place: a change of one workload touches one row,
// not the whole table.
function patchRows(tbody, items, keyOf, sigOf, rowOf) {
  const old = new Map();
  for (const tr of tbody.children) old.set(tr.dataset.key, tr);
  let at = tbody.firstChild;
  for (const item of items) {
    const key = keyOf(item), sig = sigOf(item);
    let tr = old.get(key);
    old.delete(key);
    if (!tr || tr._sig !== sig) {
      const fresh = rowOf(item);
      fresh.dataset.key = key;
      fresh._sig = sig;
      if (tr) { if (at === tr) at = fresh; tr.replaceWith(fresh); }
      tr = fresh;
    }
    if (tr === at) at = at.nextSibling; else tbody.insertBefore(tr, at);
  }
  for (const tr of old.values()) tr.remove();
}

// Redraws `root` with `draw` only when `data` changed since its last drawing.
function redrawIfChanged(root, data, draw) {
  const sig = JSON.stringify(data);
  if (root._sig === sig) return;
  root._sig = sig;
  root.replaceChildren();
  draw(root);
}

function view() {
  const hash = location.hash.replace(/^#/, "") || "queues";
  return hash.startsWith("workload/") ? "workload" : hash;
}

function showView() {
  const name = view();
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + name;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === name);
  if (name === "history") loadHistory();
  if (name === "workload") loadWorkload();
  render();
}

function bar(b) {
  const pct = (v) => (b.quota > 0 ? Math.min(100, (100 * v) / b.quota) : 0);
  const ownUsed = Math.max(0, b.used - b.borrowed);
  const meter = el("div", { class: "bar", title: b.text },
    el("span", { class: "used" }),
    el("span", { class: "reserved" }),
    el("span", { class: "borrowed" }));
  // Widths through the CSSOM (the CSP allows no inline style attributes).
  meter.children[0].style.width = pct(ownUsed) + "%";
  meter.children[1].style.width = pct(b.reserved) + "%";
  meter.children[2].style.width = pct(b.borrowed) + "%";
  return el("div", { class: "bar-row", "data-resource": b.resource, "data-used": b.used,
    "data-reserved": b.reserved, "data-quota": b.quota, "data-borrowed": b.borrowed },
    el("span", {}, b.resource), meter, el("span", { class: "meta" }, b.text));
}

function queueCard(q) {
  return el("div", { class: "queue", "data-queue": q.name },
    el("h3", {}, q.name, " ", el("span", { class: "meta" }, q.strategy)),
    el("div", { class: "meta" },
      `${q.admittedWorkloads} workload(s) admitted (${q.admittedPods} pods), ${q.pendingWorkloads} waiting (${q.pendingPods} pods)`),
    ...q.bars.map(bar));
}

function renderQueues(root) {
  redrawIfChanged(root, [state.queues, state.cohorts], drawQueues);
}

function drawQueues(root) {
  const legend = el("p", { class: "legend" }, "Bars against quota:",
    el("span", { class: "used" }), "used", el("span", { class: "reserved" }), "reserved",
    el("span", { class: "borrowed" }), "borrowed from the cohort");
  root.append(el("h1", {}, "Queues"), legend);
  if (state.queues.length === 0) root.append(el("p", { class: "empty" }, "No queue admits your namespaces."));
  const byName = new Map(state.queues.map((q) => [q.name, q]));
  for (const c of state.cohorts) {
    const group = el("div", { class: "cohort", "data-cohort": c.name },
      el("h2", {}, "Cohort ", c.name), el("div", { class: "meta" }, "Pool of the cohort:"), ...c.pool.map(bar));
    for (const name of c.queues) group.append(queueCard(byName.get(name)));
    root.append(group);
  }
  for (const q of state.queues) if (!q.cohort) root.append(queueCard(q));
}

function workloadLink(ns, name) {
  return el("a", { class: "wl", href: "#workload/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name) }, ns + "/" + name);
}

// `45s`, `12m`, `3h`, `2d`, as kubectl prints ages.
function age(since, fallback) {
  const at = Date.parse(since || "");
  if (Number.isNaN(at)) return fallback;
  const s = Math.max(0, Math.round((Date.now() - at) / 1000));
  return s < 120 ? s + "s" : s < 7200 ? Math.floor(s / 60) + "m" : s < 172800 ? Math.floor(s / 3600) + "h" : Math.floor(s / 86400) + "d";
}

const WAITING_HEADERS = ["Queue", "Position", "Workload", "Priority", "Pods waiting", "Waiting for", "Why", "Estimated wait"];

function waitingRow(w) {
  return el("tr", { "data-workload": w.namespace + "/" + w.name },
    el("td", {}, w.queue), el("td", {}, w.position), el("td", {}, workloadLink(w.namespace, w.name)),
    el("td", {}, w.priority), el("td", {}, w.pendingPods), el("td", {}, age(w.queuedSince, w.age)),
    el("td", { class: "reason" }, w.message || w.reason), el("td", {}, w.estimate));
}

// Kept between updates and patched row by row (up to 500 rows, 10 pages open: redrawing them all
// on every change is what made live updates slow).
function renderWaiting(root) {
  let tbody = root.querySelector("[data-testid=waiting] tbody");
  if (!tbody) {
    root.replaceChildren(el("h1", {}, "Waiting work"), el("p", { class: "meta", id: "waiting-count" }),
      table(WAITING_HEADERS, [], "waiting"));
    tbody = root.querySelector("[data-testid=waiting] tbody");
  }
  $("waiting-count").textContent = `${state.waitingTotal} workload(s) waiting, in the order admission considers them` +
    (state.waiting.length < state.waitingTotal ? ` (the first ${state.waiting.length} shown)` : "");
  patchRows(tbody, state.waiting, (w) => w.namespace + "/" + w.name,
    (w) => JSON.stringify(w) + age(w.queuedSince, w.age), waitingRow);
}

const KIND = { preemption: "preemption", reclaim: "cohort reclaim", requeue: "requeue (pods not ready in time)" };

function evictionRow(p, withVictim) {
  return el("tr", { "data-workload": p.namespace + "/" + p.name, "data-kind": p.kind },
    el("td", {}, p.at), el("td", { class: "kind" }, KIND[p.kind] || p.kind),
    withVictim ? el("td", {}, workloadLink(p.namespace, p.name)) : null, el("td", {}, p.queue),
    el("td", { class: "by" }, p.by), el("td", { class: "why" }, p.why), el("td", {}, p.interruption),
    withVictim ? el("td", {}, p.message) : null);
}

function renderPreemptions(root) {
  redrawIfChanged(root, state.preemptions, drawPreemptions);
}

function drawPreemptions(root) {
  root.append(el("h1", {}, "Recent preemptions and reclaims"),
    el("p", { class: "meta" }, "A preemption makes room for a workload of higher priority in the same queue; " +
      "a cohort reclaim takes back quota that the victim's queue borrowed from another queue of its cohort."));
  const rows = state.preemptions.map((p) => evictionRow(p, true));
  if (rows.length === 0) root.append(el("p", { class: "empty" }, "No preemption seen since sluice started."));
  else root.append(table(["When", "Kind", "Evicted", "Queue", "To make room for", "Why", "Interruption", "Its status now"], rows, "preemptions"));
}

// Resources of a queue's samples, cpu and memory first.
function resourcesOf(samples) {
  const names = new Set();
  for (const s of samples) for (const r of Object.keys(s.quota || {})) names.add(r);
  const rank = (r) => (r === "cpu" ? 0 : r === "memory" ? 1 : 2);
  return [...names].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

function chart(name, res, samples) {
  const W = 520, H = 160, P = 30;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("data-resource", res);
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const t0 = samples[0].t, t1 = Math.max(samples.at(-1).t, t0 + 1);
  const max = Math.max(1, ...samples.map((s) => Math.max(s.quota[res] || 0, (s.used[res] || 0) + (s.reserved[res] || 0))));
  const x = (t) => P + ((W - 2 * P) * (t - t0)) / (t1 - t0);
  const y = (v) => H - P - ((H - 2 * P) * v) / max;
  const path = (f) => samples.map((s, i) => (i ? "L" : "M") + x(s.t).toFixed(1) + " " + y(f(s)).toFixed(1)).join(" ");
  const line = (cls, d) => { const p = document.createElementNS(ns, "path"); p.setAttribute("class", cls); p.setAttribute("d", d); svg.append(p); };
  line("quota", path((s) => s.quota[res] || 0));
  line("line", path((s) => (s.used[res] || 0) + (s.reserved[res] || 0)));
  const label = (tx, ty, text) => { const t = document.createElementNS(ns, "text"); t.setAttribute("x", tx); t.setAttribute("y", ty); t.textContent = text; svg.append(t); };
  label(P, 14, `${name}: ${res} used+reserved (blue) against quota (red), last ${Math.round((t1 - t0) / 60)} min`);
  label(P, H - 8, new Date(t0 * 1000).toLocaleTimeString());
  label(W - P - 60, H - 8, new Date(t1 * 1000).toLocaleTimeString());
  return svg;
}

function renderHistory(root) {
  redrawIfChanged(root, history, drawHistory);
}

function drawHistory(root) {
  root.append(el("h1", {}, "Usage history"), el("p", { class: "meta" }, "Sampled by this sluice replica, kept in memory for the last hours; one chart per resource of each queue's quota."));
  const names = Object.keys(history).sort();
  if (names.length === 0) root.append(el("p", { class: "empty" }, "No samples yet."));
  for (const n of names) {
    const samples = history[n];
    if (!samples.length) continue;
    const charts = resourcesOf(samples).map((r) => chart(n, r, samples));
    root.append(el("div", { class: "charts", "data-history": n }, ...(charts.length ? charts : [el("p", { class: "empty" }, n + ": no quota")])));
  }
}

let detail = null;
function renderWorkload(root) {
  redrawIfChanged(root, detail, drawWorkload);
}

function drawWorkload(root) {
  if (!detail) { root.append(el("p", { class: "empty" }, "Loading…")); return; }
  if (detail.error) { root.append(el("p", { class: "error" }, detail.error)); return; }
  const d = detail;
  root.append(el("h1", {}, `${d.namespace}/${d.name}`),
    el("p", {}, `${d.source} in queue ${d.queue}, priority ${d.priority}: ${d.phase}` + (d.position ? `, position ${d.position}` : "")),
    el("p", { class: "reason" }, d.message),
    el("p", { class: "meta" }, `uses ${d.used}; reserves ${d.reserved}; borrowed ${d.borrowed}; preempted ${d.interruptedCount} time(s) (last by ${d.lastPreemptedBy}); requeued ${d.requeueCount} time(s)`),
    el("h2", {}, "Pod sets"),
    table(["Pod set", "Min", "Max", "Requests per pod", "Gated", "Admitted", "Running", "Ended"],
      d.podSets.map((p) => el("tr", {}, el("td", {}, p.name), el("td", {}, p.minCount), el("td", {}, p.maxCount ?? "-"),
        el("td", {}, p.requests), el("td", {}, p.gated), el("td", {}, p.admitted), el("td", {}, p.running), el("td", {}, p.finished))), "podsets"),
    el("h2", {}, "Preemptions, reclaims and requeues"),
    d.evictions.length === 0 ? el("p", { class: "empty" }, "None seen since sluice started.") :
      table(["When", "Kind", "Queue", "To make room for", "Why", "Interruption"], d.evictions.map((p) => evictionRow(p, false)), "evictions"),
    el("h2", {}, "Events"),
    d.events.length === 0 ? el("p", { class: "empty" }, "No event kept (Kubernetes keeps events for an hour).") :
      table(["When", "Object", "Type", "Reason", "Message", "Count", "From"],
        d.events.map((e) => el("tr", { "data-reason": e.reason }, el("td", {}, e.at), el("td", {}, e.object), el("td", {}, e.type),
          el("td", {}, e.reason), el("td", { class: "message" }, e.message), el("td", {}, e.count), el("td", {}, e.from))), "events"),
    el("h2", {}, "Conditions"),
    table(["Type", "Status", "Reason", "Message", "Since"],
      d.conditions.map((c) => el("tr", {}, el("td", {}, c.type), el("td", {}, c.status), el("td", {}, c.reason), el("td", {}, c.message), el("td", {}, c.since))), "conditions"),
    el("h2", {}, "States seen"),
    table(["When", "Phase", "Reason", "Position", "Admitted pods", "Gated pods"],
      d.states.map((s) => el("tr", {}, el("td", {}, s.at), el("td", {}, s.phase), el("td", {}, s.reason), el("td", {}, s.position ?? "-"), el("td", {}, s.admittedPods), el("td", {}, s.pendingPods))), "states"));
}

function render() {
  if (!state) return;
  const name = view();
  const root = $("view-" + name);
  if (!root) return;
  ({ queues: renderQueues, waiting: renderWaiting, preemptions: renderPreemptions,
    history: renderHistory, workload: renderWorkload })[name]?.(root);
  document.body.dataset.rendered = String(Date.now());
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin" }, options));
  if (response.status === 401) { loggedOut(); throw new Error("logged out"); }
  return response;
}

async function loadHistory() {
  history = await (await api("/api/history")).json();
  render();
}

let detailOf = null;
async function loadWorkload() {
  const [, ns, name] = location.hash.split("/");
  // Another workload: its page starts empty; the same one is refreshed in place.
  if (detailOf !== ns + "/" + name) { detailOf = ns + "/" + name; detail = null; render(); }
  const r = await api(`/api/workload/${ns}/${name}`);
  const answer = r.ok ? await r.json() : { error: (await r.json()).error };
  if (detailOf !== ns + "/" + name) return;
  detail = answer;
  render();
}

function connect() {
  if (stream) stream.close();
  stream = new EventSource("/api/stream");
  stream.addEventListener("state", (e) => {
    const received = Date.now(), t0 = performance.now();
    state = JSON.parse(e.data);
    const t1 = performance.now();
    $("live").classList.add("on");
    if (view() === "workload") loadWorkload(); else render();
    timings.push([received, t1 - t0, performance.now() - t1]);
    if (timings.length > 100) timings.shift();
  });
  stream.addEventListener("logout", () => loggedOut());
  stream.onerror = () => $("live").classList.remove("on");
}

function loggedIn(who) {
  me = who;
  const scope = who.scope.kind === "all" ? "all namespaces" : "namespaces: " + (who.scope.namespaces.join(", ") || "none");
  $("who").textContent = `${who.user} (${scope})`;
  $("login").hidden = true; $("nav").hidden = false; $("logout").hidden = false;
  connect();
  showView();
}

function loggedOut() {
  if (stream) stream.close();
  state = null; me = null;
  for (const s of document.querySelectorAll(".view")) s.hidden = true;
  $("nav").hidden = true; $("logout").hidden = true; $("who").textContent = "";
  $("login").hidden = false;
}

$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("login-error").textContent = "";
  const r = await fetch("/api/login", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: $("token").value }), credentials: "same-origin" });
  $("token").value = "";
  if (r.ok) loggedIn(await r.json());
  else $("login-error").textContent = (await r.json().catch(() => ({ error: "login failed" }))).error;
});
$("logout").addEventListener("click", async () => { await fetch("/api/logout", { method: "POST" }); loggedOut(); });
window.addEventListener("hashchange", showView);
// The history is sampled on the server every few seconds to minutes: reloaded while shown.
setInterval(() => { if (me && view() === "history") loadHistory(); }, 5000);
// Ages count on between updates.
setInterval(() => { if (me && view() === "waiting") render(); }, 5000);

(async () => {
  const r = await fetch("/api/me", { credentials: "same-origin" });
  if (r.ok) loggedIn(await r.json()); else loggedOut();
})();
