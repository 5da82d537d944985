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

// The least round number (1, 2 or 5 times a power of ten) at or above n.
function roundUp(n) {
  if (n <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const m of [1, 2, 5, 10]) if (m * power >= n) return m * power;
  return 10 * power;
}

function svgNode(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// One chart: a polyline per kind over the points (oldest first, one per
// `seconds`), drawn over a fixed window of `slots` points so that the time
// axis means the same on every row: minutes back from "now" at the right,
// and a y scale in permits per second from 0 to a round maximum.
function chart(points, slots, seconds) {
  const width = 320, height = 64, left = 34, right = 6, top = 6, bottom = 14;
  const plotW = width - left - right, plotH = height - top - bottom;
  const svg = svgNode("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, width, height });
  const peak = Math.max(0, ...points.map((p) => Math.max(p.allowed, p.denied, p.shadow)));
  const yMax = roundUp(peak);
  svg.setAttribute("data-y-max", String(yMax));
  const y = (v) => top + plotH - (v / yMax) * plotH;
  // The chart spans the `slots` points' seconds, back from now.
  const windowSeconds = Math.max(1, slots * seconds);
  const x = (i) => left + plotW - (((points.length - 1 - i) * seconds) / windowSeconds) * plotW;
  // y scale: 0, half and the maximum, with grid lines.
  for (const v of [0, yMax / 2, yMax]) {
    svg.append(svgNode("line", { class: "grid", x1: left, x2: left + plotW, y1: y(v), y2: y(v) }));
    svg.append(svgNode("text", { class: "tick y", x: left - 3, y: y(v) + 3, "text-anchor": "end" }, `${fmt(v)}/s`));
  }
  // Time axis: a tick every minute back from now.
  for (let back = 0; back <= windowSeconds; back += 60) {
    const at = (left + plotW - (back / windowSeconds) * plotW).toFixed(1);
    svg.append(svgNode("line", { class: "grid", x1: at, x2: at, y1: top, y2: top + plotH }));
    const label = back === 0 ? "now" : `−${back / 60}m`;
    const anchor = back === 0 ? "end" : back + 60 > windowSeconds ? "start" : "middle";
    svg.append(svgNode("text", { class: "tick x", x: at, y: height - 3, "text-anchor": anchor }, label));
  }
  for (const kind of KINDS) {
    const line = svgNode("polyline", { class: kind, "data-kind": kind });
    line.setAttribute(
      "points",
      points.map((p, i) => `${x(i).toFixed(1)},${y(p[kind]).toFixed(1)}`).join(" "),
    );
    svg.append(line);
  }
  return svg;
}

function renderRules(rules, slots, seconds) {
  const body = document.querySelector("#rules tbody");
  body.replaceChildren();
  const now = { allowed: 0, denied: 0, shadow: 0 };
  for (const rule of rules) {
    const name = el("td", {}, el("code", {}, rule.rule));
    if (rule.name) name.append(" ", el("span", { class: "muted" }, rule.name));
    if (rule.shadow_mode) name.append(el("span", { class: "tag" }, "shadow mode"));
    const graph = el("td", {});
    if (rule.totals) graph.append(chart(rule.points, slots, seconds));
    const limit = el("td", {}, rule.limit);
    if (rule.concurrency) {
      // Slot leases by outcome: what the totals of a concurrency-only rule count.
      const c = rule.concurrency;
      const refused = c.refused_full + c.refused_cost + c.refused_unavailable;
      limit.append(el("div", { class: "muted", "data-field": "slots" },
        `slots: ${c.acquired} acquired, ${refused} refused, ${c.released} released, ${c.expired} expired`));
    }
    if (rule.budget) {
      // A budget counts in its unit: spent, taken into debt, looks refused.
      const b = rule.budget;
      limit.append(el("div", { class: "muted", "data-field": "budget" },
        `${b.unit}: ${b.spent} spent, ${b.overdrawn} overdrawn, ${b.refused_looks} looks refused`));
    }
    const row = el("tr", { "data-rule": rule.rule }, name, limit, graph);
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

function renderTop(top, table, none) {
  const body = document.querySelector(`#${table} tbody`);
  body.replaceChildren();
  for (const key of top.keys) {
    const low = key.count - key.error;
    const count = key.error ? `${key.count} (≥ ${low})` : String(key.count);
    body.append(
      el("tr", { "data-key": key.key }, el("td", {}, el("code", {}, key.rule)), el("td", {}, key.key),
        el("td", { class: "n", "data-field": "count" }, count)),
    );
  }
  if (!top.keys.length) body.append(el("tr", {}, el("td", { colspan: "3", class: "muted" }, none)));
  document.getElementById(`${table}-window`).textContent = `last ${top.window_seconds}–${2 * top.window_seconds} s`;
  document.getElementById(`${table}-note`).textContent =
    `${top.denied_permits} permits in the window; Space-Saving sketch of ${top.counters} counters: ` +
    "each key's true count lies between the lower bound shown and its count.";
}

function renderBackend(backend) {
  const pill = document.getElementById("backend-pill");
  const state = backend.state === "n/a" ? backend.breaker : backend.state;
  pill.textContent = `${backend.kind} backend` + (state === "n/a" ? "" : ` · ${state}`);
  pill.className = `pill ${state === "down" ? "open" : state}`;
  const last = backend.last;
  document.getElementById("latency").textContent = `${last.latency_mean_us} / ${last.latency_max_us} µs`;
  const rows = [
    ["kind", backend.kind],
    ["requests decided / s", last.requests],
    ["latency mean / max", `${last.latency_mean_us} / ${last.latency_max_us} µs`],
    ["breaker", backend.breaker],
  ];
  if (backend.store) {
    const st = backend.store;
    rows.push(
      ["state", backend.state + (st.up ? "" : ` for ${st.down_seconds ?? 0} s`)],
      ["last error", st.last_error ?? "none"],
      ["decisions the store did not take since start", st.faults],
      ["health checks fail while it is down", st.health_check ? "yes" : "no"],
    );
  }
  if (backend.policy) {
    const p = last.policy;
    rows.push(
      ["by the store / s", p.store],
      ["by the policy / s: timeout · error · breaker open · overloaded · unreplicated", `${p.timeout} · ${p.error} · ${p.breaker_open} · ${p.overloaded} · ${p.unreplicated}`],
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
  renderRules(status.rules, status.chart_points, status.sample_seconds);
  renderTop(status.top_denied, "top", "no denial");
  renderTop(status.top_shadow, "top-shadow", "no shadow-mode denial");
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
