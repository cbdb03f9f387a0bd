// dashboard.js — the interactive report of analysis/dashboard.py: panels of per-step metrics (mean
// and 95% Student-t band over each group's runs, the runs themselves, smoothing, log axis, zoom,
// hover), the expert load of one run, the run table with each run's scenario diff against its
// sweep's base, and the report's tables. Data: window.MOERL (data/index.js) and the per-metric
// and per-run files it names, loaded as scripts (a page from file:// may not fetch()).
// Every chart element carries what it draws as data-* attributes (metric, series, groups,
// run-lines, drawn), which the browser test (tests/dashboard_browser.py) reads.
"use strict";
(function () {
  const D = window.MOERL;
  const M = {}, waiting = {}, LOADS = {}, loadWaiting = {};
  const metricInfo = {};
  D.metrics.forEach(m => { metricInfo[m.name] = m; });
  window.MOERL_METRIC = function (name, v) {
    M[name] = v;
    (waiting[name] || []).forEach(f => f());
    delete waiting[name];
  };
  window.MOERL_LOAD = function (i, v) {
    LOADS[i] = v;
    (loadWaiting[i] || []).forEach(f => f());
    delete loadWaiting[i];
  };
  function script(src) {
    const s = document.createElement("script");
    s.src = src;
    s.onerror = () => { throw new Error("cannot load " + src); };
    document.head.appendChild(s);
  }
  function needMetric(name, cb) {
    if (M[name]) return cb();
    if (waiting[name]) return waiting[name].push(cb);
    waiting[name] = [cb];
    script("data/m/" + metricInfo[name].file);
  }
  function needLoad(i, cb) {
    if (LOADS[i]) return cb();
    if (loadWaiting[i]) return loadWaiting[i].push(cb);
    loadWaiting[i] = [cb];
    script("data/load/" + D.runs[i].load);
  }
  const $ = id => document.getElementById(id);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "text") e.textContent = attrs[k];
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    kids.forEach(c => e.appendChild(typeof c === "string" ? document.createTextNode(c) : c));
    return e;
  }
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#843c39", "#7b4173"];
  function alpha(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
  }
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(3) : (+v.toPrecision(4)).toString();
  }

  // ---- state ----
  const withMetrics = D.runs.map((r, i) => i).filter(i => D.runs[i].has_metrics);
  const state = {
    smooth: D.smooth, groupKeys: D.group_keys.slice(), hiddenSeeds: new Set(), hiddenGroups: new Set(),
    hiddenRuns: new Set(), filter: "", showRuns: withMetrics.length <= 40, bands: true, panels: [], xrange: null,
  };
  function isNumOrBool(v) {
    return ["true", "false", "on", "off", "yes", "no"].includes(v) || (v !== "" && isFinite(Number(v)));
  }
  function keyValue(r, k) { return k === "source" ? r.source : (k === "run.seed" ? r.seed : (r.keys[k] ?? "")); }
  function groupLabel(r) {
    const ks = state.groupKeys;
    if (!ks.length) return withMetrics.length === 1 ? r.id : "all runs";
    const vals = ks.map(k => keyValue(r, k));
    if (ks.length === 1 && !isNumOrBool(vals[0])) return vals[0];
    return ks.map((k, j) => k.split(".").pop() + "=" + vals[j]).join(", ");
  }
  let GROUPS = [];
  function computeGroups() {
    const by = new Map();
    withMetrics.forEach(i => {
      const lab = groupLabel(D.runs[i]);
      if (!by.has(lab)) by.set(lab, []);
      by.get(lab).push(i);
    });
    GROUPS = [...by.entries()].map(([label, runs], gi) => ({ label, runs, color: PALETTE[gi % PALETTE.length] }));
  }
  function rowText(r) {
    return [r.id, r.source, r.status, "seed=" + r.seed, ...Object.entries(r.keys).flatMap(([k, v]) =>
      [k + "=" + v, k.split(".").pop() + "=" + v]), r.error || ""].join(" ").toLowerCase();
  }
  function passesFilter(r) {
    const toks = state.filter.toLowerCase().split(/\s+/).filter(Boolean);
    if (!toks.length) return true;
    const t = rowText(r);
    return toks.every(x => t.includes(x));
  }
  function visible(i) {
    const r = D.runs[i];
    return r.has_metrics && !state.hiddenRuns.has(i) && !state.hiddenSeeds.has(r.seed) && passesFilter(r);
  }

  // ---- numbers ----
  function smoothed(v, log) {
    const nb = D.x.length, out = new Array(nb).fill(null);
    const k = Math.max(1, Math.round(state.smooth / D.bin));
    let sum = 0, cnt = 0;
    const val = j => (j < v.length && v[j] !== null && (!log || v[j] > 0)) ? (log ? Math.log10(v[j]) : v[j]) : null;
    for (let j = 0; j < nb; j++) {
      const a = val(j);
      if (a !== null) { sum += a; cnt++; }
      if (j >= k) { const b = val(j - k); if (b !== null) { sum -= b; cnt--; } }
      out[j] = cnt > 0 && j < v.length ? sum / cnt : null;
    }
    return out;  // log10 values when log
  }
  function bandOf(ys, log, info) {
    const nb = D.x.length, mu = new Array(nb).fill(null), lo = mu.slice(), hi = mu.slice(), ns = new Array(nb).fill(0);
    const lb = log ? null : info.lo, ub = log ? null : info.hi;
    for (let j = 0; j < nb; j++) {
      let n = 0, s = 0;
      for (const y of ys) if (y[j] !== null) { n++; s += y[j]; }
      ns[j] = n;
      if (!n) continue;
      const m = s / n;
      let half = null;
      if (n > 1) {
        let ss = 0;
        for (const y of ys) if (y[j] !== null) ss += (y[j] - m) * (y[j] - m);
        half = D.t95[n - 1] * Math.sqrt(ss / (n - 1)) / Math.sqrt(n);
      }
      const back = x => log ? Math.pow(10, x) : x;
      mu[j] = back(m);
      if (half !== null) {
        let a = back(m - half), b = back(m + half);
        if (lb !== null && a < lb) a = lb;
        if (ub !== null && b > ub) b = ub;
        lo[j] = a; hi[j] = b;
      }
    }
    return { mu, lo, hi, ns };
  }

  // ---- panels ----
  let syncing = false;
  function syncX(u, key) {
    if (key !== "x" || syncing) return;
    syncing = true;
    const { min, max } = u.scales.x;
    const full = min <= D.x[0] && max >= D.x[D.x.length - 1];
    state.xrange = full ? null : [min, max];
    state.panels.forEach(p => { if (p.chart && p.chart !== u) p.chart.setScale("x", { min, max }); });
    syncing = false;
  }
  function addPanel(metric, log) {
    const p = { metric, log: !!log, chart: null };
    const box = el("div", { class: "panel" });
    const sel = el("select", { class: "metric-picker", title: "metric" });
    D.metrics.forEach(m => sel.appendChild(el("option", { value: m.name, text: m.name })));
    sel.value = metric;
    sel.addEventListener("change", () => { p.metric = sel.value; render(p); });
    const logBox = el("input", { type: "checkbox", class: "log-switch" });
    logBox.checked = p.log;
    logBox.addEventListener("change", () => { p.log = logBox.checked; render(p); });
    const close = el("button", { type: "button", class: "close", title: "remove this panel", text: "×",
                                 onclick: () => { if (p.chart) p.chart.destroy(); box.remove(); state.panels.splice(state.panels.indexOf(p), 1); } });
    const head = el("div", { class: "panel-head" }, sel, el("label", {}, logBox, " log y"), el("span", { class: "bin-how note" }), close);
    const plot = el("div", { class: "plot" });
    const tip = el("div", { class: "tip" });
    box.append(head, plot, tip);
    $("panels").appendChild(box);
    Object.assign(p, { box, plot, tip, sel, hover: false });
    plot.addEventListener("mouseenter", () => { p.hover = true; });
    plot.addEventListener("mouseleave", () => { p.hover = false; tip.style.display = "none"; });
    state.panels.push(p);
    render(p);
    return p;
  }
  function render(p) {
    p.box.dataset.rendered = "0";
    needMetric(p.metric, () => draw(p));
  }
  function draw(p) {
    const info = metricInfo[p.metric], vals = M[p.metric];
    const log = p.log;
    const data = [D.x], series = [{ label: "step" }], bands = [], meta = [];
    let runLines = 0, drawn = 0;
    GROUPS.forEach(g => {
      if (state.hiddenGroups.has(g.label)) return;
      const rs = g.runs.filter(i => visible(i) && vals[i]);
      if (!rs.length) return;
      const ys = rs.map(i => smoothed(vals[i], log));
      const b = bandOf(ys, log, info);
      data.push(b.mu);
      series.push({ label: g.label, stroke: g.color, width: 2, spanGaps: true, points: { show: false } });
      const iMu = data.length - 1;
      if (state.bands && rs.length > 1) {
        data.push(b.hi, b.lo);
        series.push({ label: g.label + " band top", stroke: "transparent", width: 0, spanGaps: true, points: { show: false } },
                    { label: g.label + " band bottom", stroke: "transparent", width: 0, spanGaps: true, points: { show: false } });
        bands.push({ series: [iMu + 1, iMu + 2], fill: alpha(g.color, 0.18) });
      }
      const lines = [];
      if (state.showRuns) rs.forEach((i, k) => {
        const y = log ? ys[k].map(v => v === null ? null : Math.pow(10, v)) : ys[k];
        data.push(y);
        series.push({ label: D.runs[i].id, stroke: alpha(g.color, 0.45), width: 1, spanGaps: true, points: { show: false } });
        lines.push({ i, y });
        runLines++;
      });
      b.mu.forEach(v => { if (v !== null) drawn += v; });
      meta.push({ g, b, n: rs.length, lines });
    });
    if (p.chart) p.chart.destroy();
    const width = Math.max(320, p.plot.clientWidth || 560);
    const binNote = D.bin > 1 ? `bins of ${D.bin} steps (${info.bin})` : "";
    p.box.querySelector(".bin-how").textContent = binNote;
    const opts = {
      width, height: 260, series, bands, legend: { show: false },
      cursor: { sync: { key: "moerl" }, drag: { x: true, y: false } },
      scales: { x: { time: false }, y: log ? { distr: 3, log: 10 } : {} },
      axes: [{ label: "RL step", size: 40 }, { label: p.metric + (log ? " (log)" : ""), size: 70 }],
      hooks: { setScale: [syncX], setCursor: [u => tooltip(p, u, meta)] },
    };
    p.chart = new uPlot(opts, data, p.plot);
    if (state.xrange) p.chart.setScale("x", { min: state.xrange[0], max: state.xrange[1] });
    Object.assign(p.box.dataset, { metric: p.metric, series: String(series.length - 1), groups: String(meta.length),
                                   runLines: String(runLines), drawn: drawn.toPrecision(8), log: String(log), rendered: "1" });
  }
  function tooltip(p, u, meta) {
    const j = u.cursor.idx;  // the other charts follow the cursor (synced); only the hovered one explains
    if (!p.hover || j === null || j === undefined || u.cursor.left < 0) { p.tip.style.display = "none"; return; }
    const x = D.x[j];
    const steps = D.bin > 1 ? `steps ${Math.round(x - (D.bin - 1) / 2)}–${Math.round(x + (D.bin - 1) / 2)}` : `step ${x}`;
    const rows = [`<b>${p.metric}</b> at ${steps}`];
    meta.forEach(m => {
      const band = m.b.lo[j] !== null ? ` [${fmt(m.b.lo[j])}, ${fmt(m.b.hi[j])}]` : "";
      rows.push(`<span style="color:${m.g.color}">■</span> ${esc(m.g.label)}: ${fmt(m.b.mu[j])}${band} (n=${m.b.ns[j]})`);
      m.lines.slice(0, 8).forEach(l => rows.push(`&nbsp;&nbsp;${esc(D.runs[l.i].id)}: ${fmt(l.y[j])}`));
      if (m.lines.length > 8) rows.push(`&nbsp;&nbsp;… ${m.lines.length - 8} more runs`);
    });
    p.tip.innerHTML = rows.join("<br>");
    p.tip.style.display = "block";
  }
  function esc(s) { return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]); }
  function redrawAll() { state.panels.forEach(render); }

  // ---- controls ----
  function controls() {
    const sm = $("smooth");
    sm.max = String(Math.max(1, Math.min(200, Math.ceil(D.steps / 4))));
    sm.step = String(D.bin);
    sm.min = String(D.bin);
    sm.value = String(Math.max(D.bin, state.smooth));
    state.smooth = +sm.value;
    $("smooth-val").textContent = sm.value;
    sm.addEventListener("input", () => { state.smooth = +sm.value; $("smooth-val").textContent = sm.value; redrawAll(); });
    $("show-runs").checked = state.showRuns;
    $("show-runs").addEventListener("change", e => { state.showRuns = e.target.checked; redrawAll(); });
    $("show-bands").addEventListener("change", e => { state.bands = e.target.checked; redrawAll(); });
    $("reset-zoom").addEventListener("click", () => {
      state.xrange = null;
      state.panels.forEach(p => p.chart && p.chart.setScale("x", { min: D.x[0], max: D.x[D.x.length - 1] }));
    });
    const gb = $("group-by");
    const candidates = D.key_names.length ? D.key_names : [];
    candidates.forEach(k => {
      const c = el("input", { type: "checkbox", class: "group-key", value: k });
      c.checked = state.groupKeys.includes(k);
      c.addEventListener("change", () => {
        state.groupKeys = candidates.filter(x => gb.querySelector(`input[value="${CSS.escape(x)}"]`).checked);
        computeGroups(); groupChips(); redrawAll(); loadSelect();
      });
      gb.appendChild(el("label", { class: "chip" }, c, k));
    });
    if (!candidates.length) gb.style.display = "none";
    const seeds = [...new Set(withMetrics.map(i => D.runs[i].seed))];
    const sd = $("seeds");
    seeds.forEach(s => {
      const c = el("input", { type: "checkbox", class: "seed-toggle", value: s });
      c.checked = true;
      c.addEventListener("change", () => { if (c.checked) state.hiddenSeeds.delete(s); else state.hiddenSeeds.add(s); redrawAll(); runTable(); });
      sd.appendChild(el("label", { class: "chip" }, c, s === "" ? "(none)" : s));
    });
    if (seeds.length < 2) sd.style.display = "none";
    const add = $("add-metric");
    add.appendChild(el("option", { value: "", text: "— metric —" }));
    D.metrics.forEach(m => add.appendChild(el("option", { value: m.name, text: m.name })));
    add.addEventListener("change", () => { if (add.value) addPanel(add.value, false); add.value = ""; });
    const b = D.bin > 1 ? `Stored at most ${D.x.length} values per run and metric: bins of ${D.bin} steps ` +
      "(mean of a bin; max for maxima and flags, min for minima)." : "Every step is stored.";
    $("bin-note").textContent = b;
    const src = D.sources.map(s => `${s.label} (${s.dir})`).join("; ");
    $("meta").textContent = `${D.runs.length} run(s), ${D.steps} steps at most, from ${src}. ` +
      "Static figures for papers: moerl report --static; tables: summary.md, summary.csv.";
  }
  function groupChips() {
    const gs = $("groups");
    gs.querySelectorAll(".chip").forEach(c => c.remove());
    GROUPS.forEach(g => {
      const c = el("input", { type: "checkbox", class: "group-toggle", value: g.label });
      c.checked = !state.hiddenGroups.has(g.label);
      c.addEventListener("change", () => { if (c.checked) state.hiddenGroups.delete(g.label); else state.hiddenGroups.add(g.label); redrawAll(); });
      gs.appendChild(el("label", { class: "chip" }, c, el("span", { class: "swatch", style: `background:${g.color}` }), g.label));
    });
  }

  // ---- expert load ----
  const MAGMA = [[0, 0, 4], [80, 18, 123], [183, 55, 121], [252, 137, 97], [252, 253, 191]];
  function colour(v) {
    if (v === null || !isFinite(v)) return [235, 235, 235];
    const t = Math.max(0, Math.min(1, v / D.load_vmax)) * (MAGMA.length - 1);
    const k = Math.min(MAGMA.length - 2, Math.floor(t)), f = t - k;
    return MAGMA[k].map((c, j) => Math.round(c + f * (MAGMA[k + 1][j] - c)));
  }
  function loadSelect() {
    const sel = $("load-run");
    const prev = sel.value;
    sel.innerHTML = "";
    const have = withMetrics.filter(i => D.runs[i].load);
    if (!have.length) { $("load-section").style.display = "none"; return; }
    have.forEach(i => sel.appendChild(el("option", { value: String(i), text: `${D.runs[i].id} — ${groupLabel(D.runs[i])}` +
      (D.sources.length > 1 ? ` (${D.runs[i].source})` : "") })));
    if (prev && have.includes(+prev)) sel.value = prev;
    sel.onchange = () => heatmap(+sel.value);
    heatmap(+sel.value);
  }
  function heatmap(i) {
    const view = $("load-view");
    needLoad(i, () => {
      const L = LOADS[i], rows = L.L * L.E, cols = D.x.length;
      view.innerHTML = "";
      const off = document.createElement("canvas");
      off.width = cols; off.height = rows;
      const ctx = off.getContext("2d"), img = ctx.createImageData(cols, rows);
      for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
        const v = c < L.v[r].length ? L.v[r][c] : null, [R, G, B] = colour(v), o = 4 * (r * cols + c);
        img.data[o] = R; img.data[o + 1] = G; img.data[o + 2] = B; img.data[o + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
      const cv = document.createElement("canvas");
      const W = Math.max(300, view.clientWidth || 900), rowH = Math.max(4, Math.min(14, Math.floor(360 / rows)));
      cv.width = W; cv.height = rows * rowH;
      const c2 = cv.getContext("2d");
      c2.imageSmoothingEnabled = false;
      c2.drawImage(off, 0, 0, W, rows * rowH);
      c2.strokeStyle = "#fff"; c2.lineWidth = 2;
      for (let l = 1; l < L.L; l++) { c2.beginPath(); c2.moveTo(0, l * L.E * rowH); c2.lineTo(W, l * L.E * rowH); c2.stroke(); }
      const tip = el("div", { class: "load-tip note", text: "hover for a value" });
      cv.addEventListener("mousemove", ev => {
        const c = Math.min(cols - 1, Math.floor(ev.offsetX / W * cols)), r = Math.min(rows - 1, Math.floor(ev.offsetY / rowH));
        const v = c < L.v[r].length ? L.v[r][c] : null;
        tip.textContent = `layer ${Math.floor(r / L.E)}, expert ${r % L.E}, ` +
          (D.bin > 1 ? `steps around ${Math.round(D.x[c])}` : `step ${D.x[c]}`) + `: ${fmt(v)} × the even share`;
      });
      view.dataset.run = D.runs[i].id;
      view.dataset.rows = String(rows);
      view.append(el("div", { class: "note", text: `${D.runs[i].id}: rows = layer × expert (${L.L} × ${L.E}), columns = RL steps 1–${D.steps}; colour 0 (black) … ${fmt(D.load_vmax)} (light)` }), cv, tip);
    });
  }

  // ---- tables ----
  function sortable(table, head, rows, cellHtml) {
    let key = -1, dir = 1;
    function paint() {
      table.innerHTML = "";
      const tr = el("tr");
      head.forEach((h, j) => tr.appendChild(el("th", { class: j === key ? (dir > 0 ? "asc" : "desc") : "", onclick: () => {
        dir = key === j ? -dir : 1; key = j; paint(); } }, h)));
      table.appendChild(tr);
      const order = rows.slice();
      if (key >= 0) order.sort((a, b) => {
        const x = a.cells[key], y = b.cells[key], nx = parseFloat(x), ny = parseFloat(y);
        const num = !isNaN(nx) && !isNaN(ny);
        return dir * (num ? nx - ny : String(x).localeCompare(String(y)));
      });
      order.forEach(r => { const row = el("tr", r.attrs || {}); r.cells.forEach((c, j) => row.appendChild(cellHtml(r, j, c))); table.appendChild(row); });
    }
    paint();
    return paint;
  }
  let paintRuns = null;
  function runTable() {
    const multi = D.sources.length > 1;
    const keys = D.key_names.filter(k => k !== "source" && k !== "run.seed");
    const head = ["show", "run"].concat(multi ? ["source"] : [], ["status", "steps", "seed"], keys,
                                       ["final reward", "final eval", "collapse step", "error"]);
    const shown = D.runs.map((r, i) => i).filter(i => passesFilter(D.runs[i]));
    const rows = shown.map(i => {
      const r = D.runs[i];
      return { i, attrs: { "data-run": r.id }, cells: ["", r.id].concat(multi ? [r.source] : [], [r.status, String(r.steps), r.seed],
        keys.map(k => r.keys[k] ?? ""), [fmt(r.final_reward), fmt(r.final_eval), r.collapse_step >= 0 ? String(r.collapse_step) : "–", r.error || ""]) };
    });
    $("run-count").textContent = `${shown.length} of ${D.runs.length} runs (the filter applies to the charts too)`;
    paintRuns = sortable($("run-table"), head, rows, (r, j, c) => {
      if (j === 0) {
        const box = el("input", { type: "checkbox", class: "run-toggle" });
        box.checked = !state.hiddenRuns.has(r.i) && D.runs[r.i].has_metrics;
        box.disabled = !D.runs[r.i].has_metrics;
        box.addEventListener("change", () => { if (box.checked) state.hiddenRuns.delete(r.i); else state.hiddenRuns.add(r.i); redrawAll(); });
        return el("td", {}, box);
      }
      if (j === 1) return el("td", {}, el("a", { href: "#diff", class: "run-link", onclick: () => diff(r.i) }, c));
      return el("td", { class: c === "failed" || (j === head.length - 1 && c) ? "failed" : "" }, c);
    });
  }
  function diff(i) {
    const r = D.runs[i], d = $("diff");
    d.innerHTML = "";
    d.appendChild(el("h3", { text: `${r.id}: scenario against the base of ${r.source}` }));
    d.appendChild(el("p", { class: "note", text: "Base = for each key, the value most of the sweep's runs share (the grid's own value for every key that neither the swept lists nor the variants set)." +
      (r.swept.length ? " Swept keys of this run: " + r.swept.map(([k, v]) => `${k}=${v}`).join(", ") + "." : "") }));
    if (!r.diff.length) { d.appendChild(el("p", { text: r.has_metrics ? "No key differs from the base." : "No results file: " + (r.error || r.status) })); return; }
    const t = el("table", { class: "diff-table" }, el("tr", {}, el("th", { text: "key" }), el("th", { text: "base" }), el("th", { text: r.id })));
    r.diff.forEach(([k, b, v]) => t.appendChild(el("tr", {}, el("td", { text: k }), el("td", { text: b === "" ? "(absent)" : b }),
                                                   el("td", { text: v === "" ? "(absent)" : v }))));
    d.appendChild(el("div", { class: "scroll" }, t));
  }
  function tables() {
    const box = $("tables");
    D.tables.forEach(tb => {
      const t = el("table", { id: "table-" + tb.id });
      box.append(el("h2", { text: tb.title }), el("div", { class: "scroll" }, t), el("p", { class: "note", text: tb.note }));
      sortable(t, tb.head, tb.rows.map(c => ({ cells: c })), (r, j, c) => el("td", {}, c));
    });
    if (D.skipped.length) {
      const s = $("skipped");
      s.appendChild(el("h2", { text: "Skipped files" }));
      const ul = el("ul");
      D.skipped.forEach(([p, why]) => ul.appendChild(el("li", {}, el("code", { text: p }), ": ", el("span", { class: "failed", text: why }))));
      s.appendChild(ul);
    }
  }

  // ---- start ----
  computeGroups();
  controls();
  groupChips();
  $("run-filter").addEventListener("input", e => { state.filter = e.target.value; runTable(); redrawAll(); });
  (D.defaults.length ? D.defaults : D.metrics.slice(0, 4).map(m => ({ metric: m.name, log: false })))
    .forEach(p => addPanel(p.metric, p.log));
  loadSelect();
  runTable();
  tables();
  window.moerlDashboard = { state, groups: () => GROUPS, addPanel, redrawAll };
})();
