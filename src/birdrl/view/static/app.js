/* birdrl view: a static, offline viewer for birdrl runs and evaluations.
 *
 * Data files are scripts calling birdrlData(name, payload) (file:// pages cannot fetch);
 * they are added to the page only when a page needs them. Everything taken from a run
 * (model text, SQL, errors) enters the page as text nodes, never as markup. */
"use strict";

(function () {
  const cache = Object.create(null);
  const waiting = Object.create(null);
  const timings = (window.birdrlTimings = {}); // ms: per page drawn, filter, index/ready since navigation start

  window.birdrlData = function (name, payload) {
    cache[name] = payload;
    if (waiting[name]) waiting[name].resolve(payload);
  };

  function load(name) {
    if (name in cache) return Promise.resolve(cache[name]);
    if (waiting[name]) return waiting[name].promise;
    const entry = {};
    entry.promise = new Promise((resolve, reject) => {
      entry.resolve = resolve;
      entry.reject = reject;
    });
    waiting[name] = entry;
    const script = document.createElement("script");
    script.src = "data/" + name + ".js";
    script.onerror = () => entry.reject(new Error("could not load data/" + name + ".js"));
    script.onload = () => {
      if (!(name in cache)) entry.reject(new Error("data/" + name + ".js holds no data"));
    };
    document.head.appendChild(script);
    return entry.promise;
  }

  // -- DOM helpers ---------------------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else if (key === "class") el.className = value;
      else if (key === "value") el.value = value;
      else el.setAttribute(key, value === true ? "" : value);
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(el, child);
      else if (child instanceof Node) el.appendChild(child);
      else el.appendChild(document.createTextNode(String(child)));
    }
  }

  const SVG = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, value);
    for (const child of children) {
      if (child instanceof Node) el.appendChild(child);
      else if (child !== null && child !== undefined) el.appendChild(document.createTextNode(String(child)));
    }
    return el;
  }

  function pct(v) {
    return v === null || v === undefined ? "—" : (100 * v).toFixed(1) + "%";
  }
  function num(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "—";
    if (Math.abs(v) !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5)) return v.toExponential(2);
    return Number(v).toFixed(digits === undefined ? 3 : digits);
  }
  function delta(cur, prev) {
    if (cur === null || cur === undefined || prev === null || prev === undefined) return null;
    const d = 100 * (cur - prev);
    if (Math.abs(d) < 0.05) return h("span", { class: "delta zero" }, "±0");
    return h("span", { class: "delta " + (d > 0 ? "up" : "down") }, (d > 0 ? "+" : "") + d.toFixed(1));
  }
  function note(text, kind) {
    return h("p", { class: kind || "note" }, text);
  }
  function badge(text, kind) {
    return h("span", { class: "badge " + (kind || "") }, text);
  }
  function outcomeBadge(outcome) {
    return badge(outcome, "o-" + outcome.replace(/\s+/g, "-"));
  }
  function details(summary, open, ...body) {
    return h("details", { open: open }, h("summary", {}, summary), ...body);
  }
  function pre(text, cls) {
    return h("pre", { class: cls || "" }, text === null || text === undefined ? "" : String(text));
  }
  function sqlText(list) {
    if (list === null || list === undefined) return null;
    return Array.isArray(list) ? list.join(";\n") : String(list);
  }

  // -- the index -----------------------------------------------------------------------------

  let INDEX = null;
  let COLUMNS = []; // flattened: every column of every source, in cell order
  let SEARCH = []; // per task row: its id and issue text, lower-cased once

  function columnOf(cell) {
    const col = COLUMNS[cell];
    if (!col) throw new Error("no column " + cell + " in this view");
    return col;
  }

  function cellLabel(cell) {
    return columnOf(cell).label;
  }

  function sameSourcePrevious(cell) {
    const col = columnOf(cell);
    const prev = COLUMNS[cell - 1];
    // the previous stage of the same run and held-out split (a run lists each split's stages together)
    return prev && prev.sourceIndex === col.sourceIndex && prev.split === col.split ? cell - 1 : null;
  }

  function outcomeName(code) {
    return INDEX.outcomes[code];
  }

  // -- router --------------------------------------------------------------------------------

  const app = () => document.getElementById("app");

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, query] = raw.split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    const params = new URLSearchParams(query || "");
    return { page: parts[0] || "run", parts: parts.slice(1), params };
  }

  function setNav(page) {
    for (const a of document.querySelectorAll("header nav a")) {
      a.classList.toggle("active", a.dataset.page === page);
    }
  }

  async function route() {
    const { page, parts, params } = parseHash();
    setNav(page);
    const root = app();
    const started = performance.now();
    try {
      let view;
      if (page === "run") view = runPage();
      else if (page === "tasks") view = tasksPage(params);
      else if (page === "episode") view = await episodePage(+parts[0], +parts[1]);
      else if (page === "groups") view = await groupsPage(parts[0], params);
      else if (page === "compare") view = await comparePage(parts, params);
      else view = note("No page " + page + " here; see the links above.", "error");
      root.replaceChildren(view);
      window.scrollTo(0, 0);
    } catch (err) {
      root.replaceChildren(h("div", { class: "error failure" }, "This page failed: " + err.message));
      console.error(err);
    }
    timings[page] = performance.now() - started;
    document.body.dataset.page = page;
    document.body.dataset.ready = "1";
  }

  // -- charts (SVG, generated here) ------------------------------------------------------------

  const PALETTE = ["#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00"];

  function lineChart(title, series, options) {
    // series: [{name, points: [[x, y], ...]}]; hover shows the nearest point's values
    const opts = options || {};
    const W = 420, H = 220, L = 52, R = 24, T = 24, B = 34;
    const all = series.flatMap((ser) => ser.points);
    const box = h("div", { class: "chart" });
    if (!all.length) {
      box.append(h("h4", {}, title), note("nothing logged"));
      return box;
    }
    let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
    if (opts.zero) y0 = Math.min(0, y0);
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
    const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const Y = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title });
    for (let i = 0; i <= 4; i++) {
      const y = y0 + ((y1 - y0) * i) / 4;
      svg.append(s("line", { x1: L, x2: W - R, y1: Y(y), y2: Y(y), class: "grid" }));
      svg.append(s("text", { x: L - 6, y: Y(y) + 4, class: "tick", "text-anchor": "end" }, num(y, 3)));
    }
    const xticks = opts.xlabels ? opts.xlabels.map((_, i) => i) : [...new Set(all.map((p) => p[0]))];
    const stride = Math.max(1, Math.ceil(xticks.length / 8));
    xticks.forEach((x, i) => {
      if (i % stride) return;
      const label = opts.xlabels ? opts.xlabels[x] : x;
      svg.append(s("text", { x: X(x), y: H - B + 16, class: "tick", "text-anchor": "middle" }, label));
    });
    svg.append(s("text", { x: W / 2, y: H - 4, class: "axis", "text-anchor": "middle" }, opts.xname || "step"));
    const colorOf = (ser, i) => ser.color || PALETTE[i % PALETTE.length];
    series.forEach((ser, i) => {
      const color = colorOf(ser, i);
      const pts = ser.points.map((p) => `${X(p[0])},${Y(p[1])}`).join(" ");
      const g = s("g", { class: "series", "data-name": ser.name });
      g.append(s("polyline", { points: pts, fill: "none", stroke: color, "stroke-width": 2 }));
      for (const p of ser.points) g.append(s("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: color }));
      svg.append(g);
    });
    const cursor = s("line", { y1: T, y2: H - B, class: "cursor", visibility: "hidden" });
    svg.append(cursor);
    const tip = h("div", { class: "tip", hidden: true });
    svg.addEventListener("mousemove", (ev) => {
      const rect = svg.getBoundingClientRect();
      const x = x0 + ((ev.clientX - rect.left) * (W / rect.width) - L) / (W - L - R) * (x1 - x0);
      let best = null;
      for (const p of all) if (best === null || Math.abs(p[0] - x) < Math.abs(best - x)) best = p[0];
      cursor.setAttribute("x1", X(best));
      cursor.setAttribute("x2", X(best));
      cursor.setAttribute("visibility", "visible");
      const rows = series
        .map((ser) => [ser.name, ser.points.find((p) => p[0] === best)])
        .filter((r) => r[1]);
      const label = opts.xlabels ? opts.xlabels[best] : (opts.xname || "step") + " " + best;
      tip.replaceChildren(h("b", {}, label), ...rows.map((r) => h("div", {}, r[0] + ": " + num(r[1][1], 4))));
      tip.hidden = false;
    });
    svg.addEventListener("mouseleave", () => {
      cursor.setAttribute("visibility", "hidden");
      tip.hidden = true;
    });
    const legend = h("div", { class: "legend" });
    series.forEach((ser, i) => {
      const item = h("label", {}, h("input", { type: "checkbox", checked: true }), h("i", { style: `background:${colorOf(ser, i)}` }), ser.name);
      item.querySelector("input").addEventListener("change", (ev) => {
        const g = svg.querySelector(`g.series[data-name="${CSS.escape(ser.name)}"]`);
        if (g) g.style.display = ev.target.checked ? "" : "none";
      });
      legend.append(item);
    });
    append(box, [h("h4", {}, title), svg, tip, legend]);
    return box;
  }

  const PREFERRED = [
    "loss", "reward", "reward_std", "frac_reward_zero_std", "kl", "completions/mean_length",
    "completions/clipped_ratio", "episodes/valid_tool_calls_per_episode", "tools/call_frequency", "diag/weight_change",
    "mean_token_accuracy", "grad_norm", "entropy",
  ];

  function curvesSection(source) {
    const cols = source.columns.filter((c) => Object.keys(c.curves || {}).length);
    const wrap = h("section", {}, h("h3", {}, "Training curves"));
    if (!cols.length) {
      wrap.append(note("No training metrics were logged in this source."));
      return wrap;
    }
    const metrics = [...new Set(cols.flatMap((c) => Object.keys(c.curves)))].sort();
    const shown = PREFERRED.filter((m) => metrics.includes(m));
    const grid = h("div", { class: "charts" });
    const draw = (metric) =>
      lineChart(metric, cols.filter((c) => c.curves[metric]).map((c) => ({ name: c.title, points: c.curves[metric], color: PALETTE[c.cell % PALETTE.length] })));
    for (const metric of shown) grid.append(draw(metric));
    const picker = h("select", { "aria-label": "add a chart" }, h("option", { value: "" }, "add a chart of …"), metrics.map((m) => h("option", { value: m }, m)));
    picker.addEventListener("change", () => {
      if (picker.value) grid.prepend(draw(picker.value));
      picker.value = "";
    });
    wrap.append(h("div", { class: "controls" }, picker), grid);
    return wrap;
  }

  // -- run page ------------------------------------------------------------------------------

  function signalText(col) {
    const d = col.diagnostics;
    if (!d) return "—";
    const parts = [];
    if (d.loss_first !== undefined && d.loss_first !== null) parts.push(`loss ${num(d.loss_first)} → ${num(d.loss_last)}`);
    if (d.reward_first !== undefined && d.reward_first !== null) parts.push(`reward ${num(d.reward_first)} → ${num(d.reward_last)}`);
    if (d.groups) parts.push(`no-signal groups ${d.groups_no_signal}/${d.groups}`);
    if (d.truncated_share !== undefined && d.truncated_share !== null) parts.push(`truncated ${pct(d.truncated_share)}`);
    if (d.weight_change !== undefined && d.weight_change !== null) parts.push(`‖Δθ‖/‖θ‖ ${num(d.weight_change)}`);
    return parts.join("; ") || "—";
  }

  function bounds(iv, signed) {
    if (!iv) return null;
    const f = (v) => (signed && v > 0 ? "+" : "") + (100 * v).toFixed(1);
    return h("span", { class: "interval", title: "95% interval" }, `[${f(iv.low)}, ${f(iv.high)}]`);
  }

  function changeCell(stats) {
    // the SR change against the previous stage of the split, with its 95% interval (Newcombe's)
    const c = stats && stats.change;
    if (!c) return null;
    const d = 100 * c.estimate;
    const same = c.low <= 0 && c.high >= 0;
    const cls = same ? "zero" : d > 0 ? "up" : "down";
    const text = Math.abs(d) < 0.05 ? "±0" : (d > 0 ? "+" : "") + d.toFixed(1);
    const why = same ? "not distinguishable from no change: the 95% interval includes 0" : "the 95% interval excludes 0";
    return h("span", { class: "delta " + cls, title: why }, text, " ", bounds(c, true), same ? " ~0" : null);
  }

  function exploredCell(col) {
    const ev = col.evaluation;
    const iv = col.stats && col.stats.explored;
    const cell = [iv ? pct(iv.estimate) : "—", " ", bounds(iv)];
    if (ev && ev.explored_first !== undefined && ev.explored_first !== null) cell.splice(1, 0, ` (${ev.explored_first}/${ev.n})`);
    if (col.stage === 3 && ev) cell.push(h("div", { class: "hint" }, "stage 3 trains single-turn: it cannot learn to look"));
    return cell;
  }

  function splitsOf(source) {
    // [[split, columns]] in the order the source lists them (null: a plain evaluation)
    const groups = new Map();
    for (const col of source.columns) {
      if (!groups.has(col.split)) groups.set(col.split, []);
      groups.get(col.split).push(col);
    }
    return [...groups.entries()];
  }

  function stageTable(source, cols) {
    const cats = [...new Set(cols.flatMap((c) => Object.keys((c.evaluation || {}).per_category || {})))];
    const head = ["column", "time", "scoring", "SR [95% interval]", "Δ SR [95% interval]", ...cats, "tool-call validity", "submitted", "explored first [95% interval]", "mean reward", "stop reasons", "training signal", ""];
    const table = h("table", { class: "stages" }, h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))));
    const body = h("tbody");
    let prev = null;
    for (const col of cols) {
      const ev = col.evaluation;
      const pev = prev && prev.evaluation;
      const catCells = cats.map((c) => {
        const v = ev && ev.per_category ? ev.per_category[c] : null;
        return h("td", {}, pct(v), " ", delta(v, pev && pev.per_category ? pev.per_category[c] : null));
      });
      const stops = ev && ev.stop_reasons ? Object.entries(ev.stop_reasons).map(([k, v]) => `${k} ${v}`).join(", ") : "—";
      const seconds = col.seconds === null || col.seconds === undefined ? "—" : (col.seconds / 60).toFixed(1) + " min";
      body.append(
        h("tr", {},
          h("td", {}, h("a", { href: `#/tasks?col=${col.cell}` }, col.title)),
          h("td", {}, seconds),
          h("td", { title: "scoring semantics (docs/evaluation.md)" }, col.semantics || "—"),
          h("td", { class: "sr" }, ev ? pct(ev.success_rate) : "not evaluated", " ", ev ? bounds(col.stats && col.stats.sr) : null),
          h("td", { class: "change" }, ev && pev ? changeCell(col.stats) || delta(ev.success_rate, pev.success_rate) : "—"),
          catCells,
          h("td", {}, ev ? pct(ev.tool_call_validity) : "—"),
          h("td", {}, ev ? (ev.submitted !== undefined ? `${ev.submitted}/${ev.n}` : pct(ev.submission_rate)) : "—"),
          h("td", { class: "explored" }, ev ? exploredCell(col) : "—"),
          h("td", {}, ev ? num(ev.mean_reward) : "—"),
          h("td", {}, stops),
          h("td", { class: "signal" }, signalText(col)),
          h("td", {}, col.groups ? h("a", { href: `#/groups/${col.cell}` }, `${col.groups} groups`) : null),
        ),
      );
      if (ev) prev = col;
    }
    table.append(body);
    return table;
  }

  function runPage() {
    const page = h("div", { class: "page" });
    if (!INDEX.sources.length) return note("Nothing to show: no source was given.", "error");
    for (const source of INDEX.sources) {
      const section = h("section", { class: "source" },
        h("h2", {}, source.label, " ", badge(source.kind)),
        h("p", { class: "path" }, source.path),
      );
      for (const n of source.notes) section.append(note(n, "warn"));
      if (!source.columns.length) {
        section.append(note("This source has no stages or episodes yet."));
        page.append(section);
        continue;
      }
      const splits = splitsOf(source);
      const charts = h("div", { class: "charts" });
      for (const [split, cols] of splits) {
        const tasks = split === null ? null : (source.splits || {})[split];
        const name = split === null || split === "held-out" ? "held-out evaluation" : "held-out split " + split;
        if (split !== null) {
          section.append(h("h3", { class: "split", "data-split": split }, split === "held-out" ? "Held-out tasks" : "Held-out split: " + split, tasks ? h("small", {}, " ", tasks) : null));
        }
        section.append(stageTable(source, cols));
        const evaluated = cols.filter((c) => c.evaluation && c.evaluation.success_rate !== null && c.evaluation.success_rate !== undefined);
        if (evaluated.length > 1) {
          const labels = evaluated.map((c) => c.title.replace(/:.*/, ""));
          const series = [
            ["SR", "success_rate"], ["tool-call validity", "tool_call_validity"],
            ["submission rate", "submission_rate"], ["explored first", "explored_first_rate"], ["mean reward", "mean_reward"],
          ].map(([label, key]) => ({ name: label, points: evaluated.map((c, i) => [i, c.evaluation[key]]).filter((p) => p[1] !== null && p[1] !== undefined) }))
            .filter((ser) => ser.points.length);
          charts.append(lineChart(name + " per stage", series, { xlabels: labels, xname: "stage", zero: true }));
        }
      }
      if (charts.childNodes.length) section.append(charts);
      const notes = source.columns.filter((c) => c.notes && c.notes.length);
      if (notes.length) {
        section.append(details("Stage notes", false, notes.map((c) => h("div", {}, h("h4", {}, c.title), h("ul", {}, c.notes.map((n) => h("li", {}, n)))))));
      }
      section.append(curvesSection(source));
      if (source.config) section.append(details("Configuration", false, pre(JSON.stringify(source.config, null, 2))));
      page.append(section);
    }
    return page;
  }

  // -- task table ----------------------------------------------------------------------------

  const PAGE_ROWS = 100;

  function filterRows(f) {
    const t = INDEX.tasks;
    const n = t.id.length;
    const needle = (f.q || "").toLowerCase();
    const cells = f.col === "" || f.col === undefined || f.col === null ? INDEX.cells.map((_, i) => i) : [+f.col];
    const outcome = f.outcome === "" || f.outcome === undefined ? -1 : INDEX.outcomes.indexOf(f.outcome);
    const stop = f.stop === "" || f.stop === undefined ? -1 : INDEX.stops.indexOf(f.stop);
    const out = [];
    for (let r = 0; r < n; r++) {
      if (f.category && t.category[r] !== f.category) continue;
      if (f.db && t.db[r] !== f.db) continue;
      if (needle && SEARCH[r].indexOf(needle) < 0) continue;
      if (outcome >= 0 && !cells.some((c) => INDEX.cells[c].outcome[r] === outcome)) continue;
      if (stop >= 0 && !cells.some((c) => INDEX.cells[c].stop[r] === stop)) continue;
      if (f.changed && !changedRow(r)) continue;
      out.push(r);
    }
    return out;
  }

  function changedRow(r) {
    for (let c = 1; c < INDEX.cells.length; c++) {
      const p = sameSourcePrevious(c);
      if (p === null) continue;
      const a = INDEX.cells[p], b = INDEX.cells[c];
      if (a.outcome[r] !== b.outcome[r] || a.reward[r] !== b.reward[r]) return true;
    }
    return false;
  }

  // > 0 when row r went better from cell a to cell b: more reward, or the same reward and a
  // better outcome (solved > partial > failed > no submission); 0 when either did not run
  // or failed for infrastructure reasons
  function progress(a, b, r) {
    const skip = [INDEX.outcomes.indexOf("not run"), INDEX.outcomes.indexOf("infra error")];
    if (skip.includes(a.outcome[r]) || skip.includes(b.outcome[r])) return 0;
    if (b.reward[r] !== a.reward[r]) return b.reward[r] - a.reward[r];
    return a.outcome[r] - b.outcome[r];
  }

  function taskCell(c, r) {
    const cell = INDEX.cells[c];
    const code = cell.outcome[r];
    const name = outcomeName(code);
    if (name === "not run") return h("td", { class: "o-none" }, "—");
    const p = sameSourcePrevious(c);
    let trend = "";
    if (p !== null) {
      const change = progress(INDEX.cells[p], cell, r);
      trend = change > 0 ? "up" : change < 0 ? "down" : "";
    }
    return h("td", { class: "cell " + trend, title: `${name}, reward ${num(cell.reward[r])}, stop ${INDEX.stops[cell.stop[r]]}` },
      h("a", { href: `#/episode/${c}/${r}` }, outcomeBadge(name), " ", num(cell.reward[r], 2)));
  }

  function tasksPage(params) {
    const t = INDEX.tasks;
    const f = {
      q: params.get("q") || "", category: params.get("category") || "", db: params.get("db") || "",
      outcome: params.get("outcome") || "", stop: params.get("stop") || "",
      col: params.get("col") || "", changed: params.get("changed") === "1",
    };
    const page = h("div", { class: "page" }, h("h2", {}, "Tasks"));
    if (!t.id.length) {
      page.append(note("No episodes in this view: nothing was evaluated yet, or every evaluation was empty."));
      return page;
    }
    const option = (v, label) => h("option", { value: v }, label || v);
    const cats = [...new Set(t.category)].filter(Boolean).sort();
    const dbs = [...new Set(t.db)].filter(Boolean).sort();
    const controls = {
      q: h("input", { type: "search", placeholder: "instance id or text", value: f.q, "aria-label": "search" }),
      category: h("select", { "aria-label": "category" }, option("", "any category"), cats.map((c) => option(c))),
      db: h("select", { "aria-label": "database" }, option("", "any database"), dbs.map((d) => option(d))),
      col: h("select", { "aria-label": "column" }, option("", "in any column"), COLUMNS.map((c) => option(String(c.cell), "in " + c.label))),
      outcome: h("select", { "aria-label": "outcome" }, option("", "any outcome"), INDEX.outcomes.map((o) => option(o))),
      stop: h("select", { "aria-label": "stop reason" }, option("", "any stop reason"), INDEX.stops.map((o) => option(o))),
      changed: h("input", { type: "checkbox", checked: f.changed }),
    };
    for (const k of ["category", "db", "col", "outcome", "stop"]) controls[k].value = f[k];
    const count = h("span", { class: "count" });
    const table = h("table", { class: "tasks" });
    const more = h("button", { type: "button" }, "show more");
    const head = h("tr", {}, h("th", {}, "instance"), h("th", {}, "db"), h("th", {}, "category"), COLUMNS.map((c) => h("th", {}, c.label)));
    table.append(h("thead", {}, head));
    const tbody = h("tbody");
    table.append(tbody);
    let rows = [];
    let shown = 0;

    function renderMore() {
      const frag = document.createDocumentFragment();
      const end = Math.min(rows.length, shown + PAGE_ROWS);
      for (let i = shown; i < end; i++) {
        const r = rows[i];
        frag.append(h("tr", {},
          h("td", { class: "id" }, h("a", { href: `#/episode/${firstCell(r)}/${r}` }, t.id[r]), h("div", { class: "query" }, t.query[r])),
          h("td", {}, t.db[r] || "—"), h("td", {}, t.category[r] || "—"),
          COLUMNS.map((c) => taskCell(c.cell, r))));
      }
      tbody.append(frag);
      shown = end;
      more.hidden = shown >= rows.length;
      count.textContent = `${rows.length} of ${t.id.length} tasks` + (rows.length > shown ? ` (first ${shown} shown)` : "");
    }

    function apply() {
      const t0 = performance.now();
      f.q = controls.q.value;
      for (const k of ["category", "db", "col", "outcome", "stop"]) f[k] = controls[k].value;
      f.changed = controls.changed.checked;
      rows = filterRows(f);
      shown = 0;
      tbody.replaceChildren();
      renderMore();
      const query = new URLSearchParams();
      for (const [k, v] of Object.entries(f)) if (v) query.set(k, v === true ? "1" : v);
      history.replaceState(null, "", "#/tasks" + (query.toString() ? "?" + query : ""));
      timings.filter = performance.now() - t0;
    }

    more.addEventListener("click", renderMore);
    controls.q.addEventListener("input", apply);
    for (const k of ["category", "db", "col", "outcome", "stop", "changed"]) controls[k].addEventListener("change", apply);
    page.append(
      h("div", { class: "controls" }, controls.q, controls.category, controls.db, controls.col, controls.outcome, controls.stop,
        h("label", {}, controls.changed, " changed between stages"), count),
      h("p", { class: "legend-line" }, "Each cell: the outcome and reward of the task's episode in that column; ",
        h("span", { class: "cell up" }, "green"), " improved on the previous stage, ", h("span", { class: "cell down" }, "red"), " got worse. Click a cell for its episode."),
      h("div", { class: "scroll" }, table), more);
    apply();
    return page;
  }

  function firstCell(r) {
    for (let c = INDEX.cells.length - 1; c >= 0; c--) if (outcomeName(INDEX.cells[c].outcome[r]) !== "not run") return c;
    return 0;
  }

  // -- episode page ---------------------------------------------------------------------------

  async function loadEpisode(c, r) {
    const cell = INDEX.cells[c];
    if (!cell) throw new Error("no column " + c);
    const k = cell.chunk[r];
    if (k === undefined || k < 0) return null;
    const chunk = await load(`ep/c${c}-${k}`);
    return chunk[String(r)] || null;
  }

  const CALL_RE = /<tool_call>[\s\S]*?(?:<\/tool_call>|$)|<function=[\s\S]*?(?:<\/function>|$)|\[TOOL_CALLS\][\s\S]*$/g;

  function highlightCalls(text) {
    const out = h("pre", { class: "model" });
    let last = 0;
    for (const m of text.matchAll(CALL_RE)) {
      if (!m[0]) continue;
      out.append(text.slice(last, m.index), h("mark", { class: "call" }, m[0]));
      last = m.index + m[0].length;
    }
    out.append(text.slice(last));
    if (!text) out.append(h("i", {}, "(empty turn)"));
    return out;
  }

  function observationView(text) {
    const body = String(text || "");
    if (body.startsWith("Error:")) return pre(body, "obs error-text");
    const lines = body.split("\n");
    if (lines.length >= 3 && /^-+$/.test(lines[1])) {
      const header = lines[0].split(" | ");
      const rows = [];
      let tail = [];
      for (let i = 2; i < lines.length; i++) {
        if (/^\(.*row/.test(lines[i])) { tail = lines.slice(i); break; }
        rows.push(lines[i].split(" | "));
      }
      if (rows.every((row) => row.length === header.length)) {
        return h("div", { class: "obs" },
          h("table", { class: "result" }, h("thead", {}, h("tr", {}, header.map((x) => h("th", {}, x)))),
            h("tbody", {}, rows.map((row) => h("tr", {}, row.map((x) => h("td", {}, x)))))),
          tail.length ? h("div", { class: "muted" }, tail.join("\n")) : null);
      }
    }
    return pre(body, "obs");
  }

  function callText(call) {
    const args = call.arguments || {};
    const sql = args.sql !== undefined ? args.sql : null;
    return h("div", { class: "parsed" }, badge(call.name, "tool"),
      sql !== null ? pre(Array.isArray(sql) ? sql.join(";\n") : String(sql), "sql") : pre(JSON.stringify(args)));
  }

  function conversation(ep) {
    const msgs = ep.messages || [];
    const wrap = h("section", {}, h("h3", {}, "Conversation"));
    if (!msgs.length) {
      wrap.append(note(ep.infra_error ? "No messages: the episode failed before the model spoke." : "This record keeps no messages (a --json report); give the trajectories file to see the turns."));
      return wrap;
    }
    const firstUser = msgs.findIndex((m) => m.role === "user");
    const prompt = msgs.slice(0, firstUser + 1);
    wrap.append(details(`Prompt (${prompt.length} messages, ${prompt.reduce((a, m) => a + String(m.content || "").length, 0)} characters)`, false,
      prompt.map((m) => h("div", { class: "msg " + m.role }, h("div", { class: "role" }, m.role), pre(m.content)))));
    let turn = 0;
    const log = ep.turn_log || [];
    for (let i = firstUser + 1; i < msgs.length; i++) {
      const m = msgs[i];
      if (m.role === "assistant") {
        const entry = log[turn] || {};
        turn += 1;
        const text = String(m.content || "");
        const box = h("div", { class: "msg assistant" },
          h("div", { class: "role" }, `turn ${turn} · model`, entry.seconds !== undefined ? h("span", { class: "muted" }, ` · env ${num(entry.seconds * 1000, 1)} ms`) : null),
          highlightCalls(text));
        if (m.tool_calls) append(box, m.tool_calls.map((tc) => callText(tc.function || tc)));
        if (entry.parse_error) {
          box.append(h("div", { class: "unparsed" }, h("b", {}, "Not a usable tool call: "), entry.parse_error));
        } else if (entry.calls) {
          box.append(h("div", { class: "calls" }, h("span", { class: "muted" }, `read as ${entry.calls.length} call(s):`), entry.calls.map(callText)));
        }
        wrap.append(box);
      } else if (m.role === "tool") {
        wrap.append(h("div", { class: "msg tool" }, h("div", { class: "role" }, `${m.name || "tool"} · observation`), observationView(m.content)));
      } else {
        const unusable = String(m.content || "").startsWith("Your tool call was not usable");
        wrap.append(h("div", { class: "msg env" + (unusable ? " unparsed" : "") }, h("div", { class: "role" }, unusable ? "environment · the turn did not parse" : m.role), pre(m.content)));
      }
    }
    return wrap;
  }

  // token diff: LCS over words and whitespace/punctuation, line diff when too long
  function tokens(text) {
    return String(text || "").match(/\s+|[A-Za-z_0-9.]+|[^\sA-Za-z_0-9.]/g) || [];
  }

  function diff(a, b) {
    let A = tokens(a), B = tokens(b);
    if (A.length * B.length > 4e6) {
      A = String(a || "").split(/(?<=\n)/);
      B = String(b || "").split(/(?<=\n)/);
    }
    const n = A.length, m = B.length;
    const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) dp[i][j] = A[i] === B[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
    const out = h("pre", { class: "diff" });
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && A[i] === B[j]) { out.append(A[i]); i++; j++; }
      else if (j < m && (i >= n || dp[i][j + 1] >= dp[i + 1][j])) { out.append(h("ins", {}, B[j])); j++; }
      else { out.append(h("del", {}, A[i])); i++; }
    }
    return out;
  }

  const UNRECORDED = "not recorded (birdrl view --tasks SPEC fills it in from the task set)";

  function sqlSection(ep) {
    const wrap = h("section", {}, h("h3", {}, "SQL"));
    const issue = sqlText(ep.issue_sql);
    const sub = sqlText(ep.submission);
    const ref = sqlText(ep.sol_sql);
    const grid = h("div", { class: "sql3" },
      h("div", {}, h("h4", {}, "issue SQL"), issue ? pre(issue, "sql") : note(UNRECORDED)),
      h("div", {}, h("h4", {}, "submitted"), sub !== null ? pre(sub, "sql") : note("nothing was submitted")),
      h("div", {}, h("h4", {}, "reference"), ref ? pre(ref, "sql") : note(UNRECORDED)));
    wrap.append(grid);
    const compare = (title, a, b) =>
      wrap.append(h("h4", {}, title), a === b ? note("identical") : diff(a, b));
    if (sub !== null && issue) compare("issue SQL → submitted", issue, sub);
    if (sub !== null && ref) compare("submitted → reference", sub, ref);
    return wrap;
  }

  function testsSection(ep) {
    const wrap = h("section", {}, h("h3", {}, "Hidden tests"));
    const t = ep.tests;
    if (!t) {
      wrap.append(note(ep.submission ? "Test verdicts were not recorded for this episode." : "Nothing was scored: the episode ended without a submission."));
      return wrap;
    }
    wrap.append(h("p", {}, badge(`${t.passed} of ${t.expected} passed`, t.passed === t.expected ? "o-solved" : "o-failed"),
      t.run !== undefined && t.run !== null ? ` (${t.run} run)` : "",
      ep.execution_error ? badge("the submission failed to execute", "o-failed") : null,
      ep.timeout_error ? badge("timed out", "o-failed") : null,
      ep.issue_sql_passed ? badge("invalid task: its issue SQL passes", "warn") : null));
    if (t.infra_error) wrap.append(note("Infrastructure error: " + t.infra_error, "error"));
    // the runner names the cases test_1..test_N (N = tests run) and prefixes each error with its name
    const failed = new Set(t.failed_tests || []);
    const errors = [...(t.errors || [])];
    const cases = [];
    for (let i = 1; i <= (t.run || 0); i++) {
      const name = "test_" + i;
      const k = errors.findIndex((e) => e.startsWith(name + ": "));
      const error = k >= 0 ? errors.splice(k, 1)[0].slice(name.length + 2) : "";
      cases.push(h("tr", { class: failed.has(name) ? "fail" : "pass" }, h("td", {}, name),
        h("td", {}, failed.has(name) ? badge("failed", "o-failed") : badge("passed", "o-solved")),
        h("td", {}, error ? pre(error, "error-text") : "")));
    }
    if (cases.length) wrap.append(h("table", { class: "cases" }, h("thead", {}, h("tr", {}, h("th", {}, "test"), h("th", {}, "verdict"), h("th", {}, "error"))), h("tbody", {}, cases)));
    else if (!t.infra_error) wrap.append(note("No test ran: the submission failed before its tests (see the error below)."));
    if (errors.length) append(wrap, [h("h4", {}, "errors"), errors.map((e) => pre(e, "error-text"))]);
    return wrap;
  }

  function episodeView(ep) {
    const wrap = h("div", { class: "episode" });
    wrap.append(h("div", { class: "facts" },
      outcomeBadge(ep.outcome), badge("reward " + num(ep.reward)), badge("stop: " + ep.stop_reason),
      ep.mutated === undefined ? null : badge(ep.mutated ? "replica mutated" : "replica unchanged", ep.mutated ? "warn" : ""),
      ep.turns === undefined ? null : badge(`${ep.turns} turns`),
      ep.tool_calls === undefined ? null : badge(`${ep.tool_calls} tool calls`),
      ep.invalid_tool_calls ? badge(`${ep.invalid_tool_calls} invalid`, "o-failed") : null,
      ep.sql_errors ? badge(`${ep.sql_errors} SQL errors`) : null,
      ep.seconds !== undefined ? badge(`${num(ep.seconds, 2)} s`) : null,
      ep.traj_id ? h("span", { class: "muted" }, " " + ep.traj_id) : null));
    if (ep.infra_error) wrap.append(note("Infrastructure error (not scored as a wrong answer): " + ep.infra_error, "error"));
    wrap.append(h("section", {}, h("h3", {}, "Issue"), ep.query ? pre(ep.query, "issue") : note(UNRECORDED)));
    wrap.append(conversation(ep), sqlSection(ep), testsSection(ep));
    wrap.append(details("Raw record", false, pre(JSON.stringify(ep, null, 1))));
    return wrap;
  }

  async function episodePage(c, r) {
    const t = INDEX.tasks;
    if (!(c in INDEX.cells) || !(r >= 0 && r < t.id.length)) return note("No such episode in this view.", "error");
    const ep = await loadEpisode(c, r);
    const page = h("div", { class: "page" });
    const others = COLUMNS.filter((col) => col.cell !== c && outcomeName(INDEX.cells[col.cell].outcome[r]) !== "not run");
    page.append(h("h2", {}, t.id[r], " ", h("small", {}, `${t.db[r] || ""} · ${t.category[r] || ""} · ${cellLabel(c)}`)));
    const nav = h("div", { class: "controls" }, h("a", { href: `#/tasks?col=${c}` }, "← tasks"));
    const neighbours = [-1, 1].map((d) => {
      for (let x = r + d; x >= 0 && x < t.id.length; x += d) if (INDEX.cells[c].chunk[x] >= 0) return x;
      return null;
    });
    if (neighbours[0] !== null) nav.append(h("a", { href: `#/episode/${c}/${neighbours[0]}` }, "previous task"));
    if (neighbours[1] !== null) nav.append(h("a", { href: `#/episode/${c}/${neighbours[1]}` }, "next task"));
    if (others.length) nav.append(h("span", {}, "same task in: ", others.map((col) => h("a", { href: `#/episode/${col.cell}/${r}`, class: "chip" }, col.label))));
    const prev = sameSourcePrevious(c);
    if (prev !== null) nav.append(h("a", { href: `#/compare/${prev}/${c}/${r}` }, "compare with the previous stage"));
    page.append(nav);
    if (!ep) {
      page.append(note("This task has no episode in this column (it was not run there).", "warn"));
      return page;
    }
    page.append(episodeView(ep));
    return page;
  }

  // -- GRPO groups -----------------------------------------------------------------------------

  function completionView(completion) {
    if (completion === null || completion === undefined) return note("not logged");
    if (typeof completion === "string") return highlightCalls(completion);
    if (!Array.isArray(completion)) return pre(JSON.stringify(completion, null, 1));
    return h("div", {}, completion.map((m) => {
      if (m.role === "tool") return h("div", { class: "msg tool" }, h("div", { class: "role" }, m.name || "tool"), observationView(m.content));
      return h("div", { class: "msg " + (m.role || "") },
        m.content ? highlightCalls(String(m.content)) : null,
        (m.tool_calls || []).map((tc) => callText(tc.function || tc)));
    }));
  }

  function promptText(prompt) {
    if (typeof prompt === "string") return prompt;
    if (Array.isArray(prompt)) {
      const user = prompt.filter((m) => m.role === "user").pop();
      return user ? String(user.content || "") : JSON.stringify(prompt);
    }
    return JSON.stringify(prompt);
  }

  async function groupsPage(cellArg, params) {
    const page = h("div", { class: "page" }, h("h2", {}, "GRPO groups"));
    const withGroups = COLUMNS.filter((c) => c.groups);
    if (!withGroups.length) {
      page.append(note("No GRPO groups were logged in this view (stages 3 and 4 of a curriculum run write stageN/groups.jsonl; runs from before birdrl logged them have none)."));
      return page;
    }
    const c = cellArg === undefined ? withGroups[0].cell : +cellArg;
    const col = columnOf(c);
    const picker = h("select", { "aria-label": "stage" }, withGroups.map((x) => h("option", { value: String(x.cell) }, x.label)));
    picker.value = String(c);
    picker.addEventListener("change", () => (location.hash = `#/groups/${picker.value}`));
    const steps = col.group_steps || [];
    const step = params.get("step") !== null ? +params.get("step") : steps[0];
    const stepPicker = h("select", { "aria-label": "step" }, steps.map((x) => h("option", { value: String(x) }, "step " + x)));
    stepPicker.value = String(step);
    stepPicker.addEventListener("change", () => (location.hash = `#/groups/${c}?step=${stepPicker.value}`));
    page.append(h("div", { class: "controls" }, picker, stepPicker,
      h("span", { class: "muted" }, `${col.groups} groups logged over ${steps.length} steps`)));
    if (!col.groups) {
      page.append(note("This column logged no groups."));
      return page;
    }
    const groups = (await load(`groups/c${c}`)).filter((g) => g.step === step);
    const rowOf = new Map(INDEX.tasks.id.map((id, i) => [id, i]));
    for (const g of groups) {
      const members = g.completions || [];
      const rewards = members.map((m) => m.reward).filter((x) => x !== null && x !== undefined);
      const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
      const flat = rewards.length > 1 && rewards.every((x) => x === rewards[0]);
      const row = rowOf.get(g.instance_id);
      const card = h("section", { class: "group" },
        h("h3", {}, `group ${g.group}: `, g.instance_id ? (row !== undefined ? h("a", { href: `#/tasks?q=${encodeURIComponent(g.instance_id)}` }, g.instance_id) : g.instance_id) : "(task not identified)",
          " ", badge(`mean reward ${num(mean)}`), flat ? badge("no signal: equal rewards, zero advantages", "warn") : null),
        details("Prompt", false, pre(promptText(g.prompt))),
        h("div", { class: "completions" }, members.map((m, i) => {
          const adv = m.advantage;
          const cls = adv === null || adv === undefined || Math.abs(adv) < 1e-6 ? "zero" : adv > 0 ? "pos" : "neg";
          return h("div", { class: "completion " + cls },
            h("div", { class: "head" }, h("b", {}, `#${i + 1}`), badge("reward " + num(m.reward)), badge("advantage " + num(adv), "adv-" + cls)),
            completionView(m.completion));
        })));
      page.append(card);
    }
    if (!groups.length) page.append(note("No group was logged at this step."));
    return page;
  }

  // -- compare -----------------------------------------------------------------------------------

  async function comparePage(parts, params) {
    const page = h("div", { class: "page" }, h("h2", {}, "Compare"));
    if (COLUMNS.length < 2) {
      page.append(note("Compare needs two columns: a run with two evaluated stages, or two sources (birdrl view A B)."));
      return page;
    }
    const a = parts[0] !== undefined ? +parts[0] : COLUMNS.length - 2;
    const b = parts[1] !== undefined ? +parts[1] : COLUMNS.length - 1;
    columnOf(a); columnOf(b);
    const pick = (value) => {
      const sel = h("select", {}, COLUMNS.map((c) => h("option", { value: String(c.cell) }, c.label)));
      sel.value = String(value);
      return sel;
    };
    const selA = pick(a), selB = pick(b);
    const go = () => (location.hash = `#/compare/${selA.value}/${selB.value}`);
    selA.addEventListener("change", go);
    selB.addEventListener("change", go);
    page.append(h("div", { class: "controls" }, selA, " → ", selB));
    const A = INDEX.cells[a], B = INDEX.cells[b];
    const none = INDEX.outcomes.indexOf("not run"), solved = INDEX.outcomes.indexOf("solved");
    const flips = { fixed: [], regressed: [], "reward up": [], "reward down": [], "better outcome": [], "worse outcome": [], "other change": [] };
    let both = 0;
    for (let r = 0; r < INDEX.tasks.id.length; r++) {
      if (A.outcome[r] === none || B.outcome[r] === none) continue;
      both += 1;
      const better = progress(A, B, r); // at equal reward: the outcome's rank
      let kind = null;
      if (A.outcome[r] !== solved && B.outcome[r] === solved) kind = "fixed";
      else if (A.outcome[r] === solved && B.outcome[r] !== solved) kind = "regressed";
      else if (B.reward[r] > A.reward[r]) kind = "reward up";
      else if (B.reward[r] < A.reward[r]) kind = "reward down";
      else if (better > 0) kind = "better outcome"; // e.g. now it submits
      else if (better < 0) kind = "worse outcome";
      else if (A.outcome[r] !== B.outcome[r]) kind = "other change"; // to or from an infra error
      if (kind) flips[kind].push(r);
    }
    const changed = Object.values(flips).reduce((x, l) => x + l.length, 0);
    page.append(h("p", {}, `${both} tasks in both; ${changed} changed: `, Object.entries(flips).map(([k, l]) => badge(`${k} ${l.length}`, ["fixed", "reward up", "better outcome"].includes(k) ? "o-solved" : ["regressed", "reward down", "worse outcome"].includes(k) ? "o-failed" : ""))));
    const row = parts[2] !== undefined ? +parts[2] : null;
    if (row !== null) {
      const [ea, eb] = await Promise.all([loadEpisode(a, row), loadEpisode(b, row)]);
      page.append(h("h3", {}, INDEX.tasks.id[row]),
        h("div", { class: "side" },
          h("div", {}, h("h4", {}, cellLabel(a)), ea ? episodeView(ea) : note("not run in this column")),
          h("div", {}, h("h4", {}, cellLabel(b)), eb ? episodeView(eb) : note("not run in this column"))));
      return page;
    }
    if (!changed) {
      page.append(note(both ? "No task changed between these two columns." : "These two columns share no task."));
      return page;
    }
    const table = h("table", { class: "tasks" }, h("thead", {}, h("tr", {}, ["change", "instance", "category", cellLabel(a), cellLabel(b)].map((x) => h("th", {}, x)))));
    const body = h("tbody");
    for (const [kind, list] of Object.entries(flips)) {
      for (const r of list) {
        body.append(h("tr", {}, h("td", {}, kind), h("td", {}, h("a", { href: `#/compare/${a}/${b}/${r}` }, INDEX.tasks.id[r])),
          h("td", {}, INDEX.tasks.category[r] || "—"), taskCell(a, r), taskCell(b, r)));
      }
    }
    table.append(body);
    page.append(table);
    return page;
  }

  // -- start -----------------------------------------------------------------------------------

  async function start() {
    try {
      INDEX = await load("index");
    } catch (err) {
      app().replaceChildren(h("div", { class: "error failure" }, "The viewer's data did not load (" + err.message + "). Rebuild it with birdrl view."));
      console.error(err);
      return;
    }
    COLUMNS = [];
    INDEX.sources.forEach((source, si) => source.columns.forEach((col) => COLUMNS.push({ ...col, sourceIndex: si })));
    SEARCH = INDEX.tasks.id.map((id, r) => (id + "\n" + INDEX.tasks.query[r]).toLowerCase());
    const meta = document.getElementById("meta");
    meta.textContent = `${INDEX.sources.map((x) => x.label).join(" vs ")} · ${INDEX.tasks.id.length} tasks · built ${INDEX.generated}`;
    timings.index = performance.now(); // ms since navigation start
    window.addEventListener("hashchange", route);
    await route();
    timings.ready = performance.now();
  }

  start();
})();
