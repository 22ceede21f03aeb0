// sluice dashboard: plain DOM, no framework. Every value from the server is put into the page as
// text (textContent, attributes set one by one), never parsed as HTML: names, labels and messages
// are user input.
"use strict";

const $ = (id) => document.getElementById(id);
let state = null;
let history = {};
let me = null;
let stream = null;

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

function renderWaiting(root) {
  root.append(el("h1", {}, "Waiting work"),
    el("p", { class: "meta" }, `${state.waitingTotal} workload(s) waiting, in the order admission considers them` +
      (state.waiting.length < state.waitingTotal ? ` (the first ${state.waiting.length} shown)` : "")));
  const rows = state.waiting.map((w) => el("tr", { "data-workload": w.namespace + "/" + w.name },
    el("td", {}, w.queue), el("td", {}, w.position), el("td", {}, workloadLink(w.namespace, w.name)),
    el("td", {}, w.priority), el("td", {}, w.pendingPods), el("td", {}, age(w.queuedSince, w.age)),
    el("td", { class: "reason" }, w.message || w.reason), el("td", {}, w.estimate)));
  root.append(table(["Queue", "Position", "Workload", "Priority", "Pods waiting", "Waiting for", "Why", "Estimated wait"], rows, "waiting"));
}

function renderPreemptions(root) {
  root.append(el("h1", {}, "Recent preemptions and reclaims"));
  const rows = state.preemptions.map((p) => el("tr", { "data-workload": p.namespace + "/" + p.name },
    el("td", {}, p.at), el("td", {}, workloadLink(p.namespace, p.name)), el("td", {}, p.queue),
    el("td", { class: "by" }, p.by), el("td", {}, p.interruption), el("td", {}, p.message)));
  if (rows.length === 0) root.append(el("p", { class: "empty" }, "No preemption seen since sluice started."));
  else root.append(table(["When", "Evicted", "Queue", "To make room for", "Interruption", "Its status now"], rows, "preemptions"));
}

function chart(name, samples) {
  const W = 640, H = 160, P = 30;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const resources = Object.keys(samples.at(-1)?.quota || {});
  const res = resources.includes("cpu") ? "cpu" : resources[0];
  if (!res) return el("p", { class: "empty" }, "no quota");
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
  root.append(el("h1", {}, "Usage history"), el("p", { class: "meta" }, "Sampled by this sluice replica, kept in memory for the last hours."));
  const names = Object.keys(history).sort();
  if (names.length === 0) root.append(el("p", { class: "empty" }, "No samples yet."));
  for (const n of names) if (history[n].length) root.append(el("div", { "data-history": n }, chart(n, history[n])));
}

let detail = null;
function renderWorkload(root) {
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
  root.replaceChildren();
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

async function loadWorkload() {
  const [, ns, name] = location.hash.split("/");
  detail = null;
  const r = await api(`/api/workload/${ns}/${name}`);
  detail = r.ok ? await r.json() : { error: (await r.json()).error };
  render();
}

function connect() {
  if (stream) stream.close();
  stream = new EventSource("/api/stream");
  stream.addEventListener("state", (e) => {
    state = JSON.parse(e.data);
    $("live").classList.add("on");
    if (view() === "workload") loadWorkload(); else render();
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
