// The status page: polls /status.json every second and draws it.
// Everything here is served by the server itself (no CDN, no fonts).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const KINDS = ["allowed", "denied", "shadow"];
let token = sessionStorage.getItem("tollgate-token");
let renders = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) node.append(child);
  return node;
}

function fmt(n) {
  return n >= 100 || Number.isInteger(n) ? Math.round(n).toLocaleString("en") : n.toFixed(1);
}

// One small chart: a polyline per kind over the points (oldest first).
function chart(points, width, height) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1, ...points.map((p) => Math.max(p.allowed, p.denied, p.shadow)));
  const step = points.length > 1 ? width / (points.length - 1) : width;
  for (const kind of KINDS) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", kind);
    line.setAttribute("data-kind", kind);
    line.setAttribute(
      "points",
      points.map((p, i) => `${(i * step).toFixed(1)},${(height - 1 - (p[kind] / max) * (height - 2)).toFixed(1)}`).join(" "),
    );
    svg.append(line);
  }
  return svg;
}

function renderRules(rules) {
  const body = document.querySelector("#rules tbody");
  body.replaceChildren();
  const now = { allowed: 0, denied: 0, shadow: 0 };
  for (const rule of rules) {
    const name = el("td", {}, el("code", {}, rule.rule));
    if (rule.name) name.append(" ", el("span", { class: "muted" }, rule.name));
    if (rule.shadow_mode) name.append(el("span", { class: "tag" }, "shadow mode"));
    const graph = el("td", {});
    if (rule.totals) graph.append(chart(rule.points, 260, 44));
    const row = el("tr", { "data-rule": rule.rule }, name, el("td", {}, rule.limit), graph);
    for (const kind of KINDS) {
      const value = rule.totals ? rule.totals[kind] : null;
      row.append(el("td", { class: "n", "data-field": kind }, value === null ? "–" : String(value)));
      const last = rule.points[rule.points.length - 1];
      if (last) now[kind] += last[kind];
    }
    body.append(row);
  }
  for (const kind of KINDS) document.getElementById(`rate-${kind}`).textContent = fmt(now[kind]);
}

function renderTop(top) {
  const body = document.querySelector("#top tbody");
  body.replaceChildren();
  for (const key of top.keys) {
    const low = key.count - key.error;
    const count = key.error ? `${key.count} (≥ ${low})` : String(key.count);
    body.append(
      el("tr", { "data-key": key.key }, el("td", {}, el("code", {}, key.rule)), el("td", {}, key.key),
        el("td", { class: "n", "data-field": "count" }, count)),
    );
  }
  if (!top.keys.length) body.append(el("tr", {}, el("td", { colspan: "3", class: "muted" }, "no denial")));
  document.getElementById("top-window").textContent = `last ${top.window_seconds}–${2 * top.window_seconds} s`;
  document.getElementById("top-note").textContent =
    `${top.denied_permits} permits denied in the window; Space-Saving sketch of ${top.counters} counters: ` +
    "each key's true count lies between the lower bound shown and its count.";
}

function renderBackend(backend) {
  const pill = document.getElementById("backend-pill");
  pill.textContent = `${backend.kind} backend` + (backend.breaker === "n/a" ? "" : ` · breaker ${backend.breaker}`);
  pill.className = `pill ${backend.breaker}`;
  const last = backend.last;
  document.getElementById("latency").textContent = `${last.latency_mean_us} / ${last.latency_max_us} µs`;
  const rows = [
    ["kind", backend.kind],
    ["requests decided / s", last.requests],
    ["latency mean / max", `${last.latency_mean_us} / ${last.latency_max_us} µs`],
    ["breaker", backend.breaker],
  ];
  if (backend.policy) {
    const p = last.policy;
    rows.push(
      ["by the store / s", p.store],
      ["by the policy / s: timeout · error · breaker open · overloaded", `${p.timeout} · ${p.error} · ${p.breaker_open} · ${p.overloaded}`],
      ["policy answers / s: allowed · denied", `${p.allowed} · ${p.denied}`],
      ["policy decisions since start", backend.policy.allowed + backend.policy.denied],
    );
  }
  document.querySelector("#backend tbody").replaceChildren(
    ...rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: "n" }, String(v)))),
  );
}

async function refresh() {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  let response;
  try {
    response = await fetch("/status.json", { headers, cache: "no-store" });
  } catch (error) {
    document.getElementById("updated").textContent = `unreachable: ${error}`;
    return;
  }
  if (response.status === 401) {
    document.getElementById("token-form").hidden = false;
    document.body.dataset.state = "token";
    if (token) document.getElementById("token-error").textContent = "wrong token";
    return;
  }
  const status = await response.json();
  renderRules(status.rules);
  renderTop(status.top_denied);
  renderBackend(status.backend);
  renders += 1;
  document.body.dataset.state = "ready";
  document.body.dataset.renders = String(renders);
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  token = document.getElementById("token").value.trim();
  sessionStorage.setItem("tollgate-token", token);
  document.getElementById("token-form").hidden = true;
  refresh();
});

refresh();
setInterval(refresh, 1000);
