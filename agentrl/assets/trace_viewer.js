// agentrl trace viewer: renders the runs' traces embedded in this page (no network, no server).
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const RUNS = DATA.runs;
  const COLOURS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#4a5568"];
  const S = { run: 0, file: 0, traj: null, step: null, token: null, view: "episodes", colour: "adv",
              cmp: null };

  // -- small helpers ---------------------------------------------------------------------------
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k === "style") el.style.cssText = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const num = (v) => (v === null || v === undefined ? "–" : String(v));
  const f3 = (v) => (v === null || v === undefined ? "–" : (Math.round(v * 1000) / 1000).toString());
  const run = () => RUNS[S.run];
  const file = () => run().files[S.file];
  const isTrain = (f) => f.meta && f.meta.kind === "train";
  function stepCount(f) { return f.episodes.reduce((n, e) => n + e.steps.length, 0); }
  function fileLabel(f) {
    const m = f.meta || {};
    if (m.kind === "train") return `iteration ${m.iteration}`;
    if (m.phase) return `eval ${m.phase}` + (m.iteration !== null && m.iteration !== undefined ? ` (iteration ${m.iteration})` : "");
    return f.name;
  }

  // -- colours ---------------------------------------------------------------------------------
  function fileScale(f) {
    let adv = 1e-9, gap = 1e-9;
    for (const e of f.episodes) for (const s of e.steps) {
      const t = s.tokens; if (!t) continue;
      for (let j = 0; j < t.text.length; j++) {
        if (t.advantage && t.advantage[j] !== null) adv = Math.max(adv, Math.abs(t.advantage[j]));
        const g = tokenGap(t, j); if (g !== null) gap = Math.max(gap, Math.abs(g));
      }
    }
    return { adv, gap };
  }
  function tokenGap(t, j) {
    if (!t.learner_logprob || t.learner_logprob[j] === null || !t.engine_logprob) return null;
    return t.learner_logprob[j] - t.engine_logprob[j];
  }
  function tokenColour(t, j, scale) {
    if (S.colour === "adv") {
      const a = t.advantage ? t.advantage[j] : null;
      if (a === null || a === undefined) return "transparent";
      const x = Math.min(1, Math.abs(a) / scale.adv);
      return a >= 0 ? `rgba(56,161,105,${0.1 + 0.7 * x})` : `rgba(229,62,62,${0.1 + 0.7 * x})`;
    }
    const g = tokenGap(t, j);
    if (g === null) return "repeating-linear-gradient(45deg,#eee,#eee 3px,#fff 3px,#fff 6px)";
    const x = Math.min(1, Math.abs(g) / scale.gap);
    return `rgba(221,107,32,${0.05 + 0.8 * x})`;
  }
  function legend() {
    const el = document.getElementById("legend");
    el.replaceChildren(h("h3", {}, "Colours"),
      S.colour === "adv"
        ? h("div", {}, h("span", { class: "swatch", style: "background:rgba(56,161,105,.8)" }), "positive advantage ",
            h("span", { class: "swatch", style: "background:rgba(229,62,62,.8)" }), "negative")
        : h("div", {}, h("span", { class: "swatch", style: "background:rgba(221,107,32,.85)" }),
            "|learner − engine| log-prob; hatched: no learner pass"),
      h("div", { class: "muted" }, "underlined: clipped by PPO; faded: not in the loss"));
  }

  // -- filters ---------------------------------------------------------------------------------
  function fillFilters() {
    const cats = new Set(), agents = new Set();
    for (const f of run().files) for (const e of f.episodes) {
      cats.add(e.category); if (e.agent) agents.add(e.agent);
      for (const s of e.steps) if (s.agent) agents.add(s.agent);
    }
    const set = (id, values) => {
      const sel = document.getElementById(id), keep = sel.value;
      sel.replaceChildren(h("option", { value: "" }, "any"), ...[...values].sort().map((v) => h("option", { value: v }, v)));
      if ([...values].includes(keep)) sel.value = keep;
    };
    set("f-category", cats); set("f-agent", agents);
  }
  function passes(e) {
    const c = document.getElementById("f-category").value;
    const o = document.getElementById("f-outcome").value;
    const a = document.getElementById("f-agent").value;
    const inv = document.getElementById("f-invalid").checked;
    if (c && e.category !== c) return false;
    if (o && e.outcome !== o) return false;
    if (a && e.agent !== a && !e.steps.some((s) => s.agent === a)) return false;
    if (inv && !(e.invalid_actions > 0)) return false;
    return true;
  }

  // -- header and side -------------------------------------------------------------------------
  function renderRuns() {
    document.getElementById("runs").replaceChildren(...RUNS.map((r, i) =>
      h("button", { class: i === S.run ? "on" : null, title: r.path, "data-run": i,
                    on: { click: () => { S.run = i; S.file = 0; S.traj = S.step = S.token = null; fillFilters(); render(); } } },
        r.label)));
    for (const b of document.querySelectorAll("#views button")) b.classList.toggle("on", b.dataset.view === S.view);
  }
  function renderFiles() {
    document.getElementById("files").replaceChildren(...run().files.map((f, i) =>
      h("button", { class: i === S.file ? "on" : null, "data-file": f.name,
                    on: { click: () => { S.file = i; S.traj = S.step = S.token = null; S.view = "episodes"; render(); } } },
        fileLabel(f),
        h("span", { class: "count" }, `${f.episodes.length} episodes · ${stepCount(f)} steps`))));
  }

  // -- episodes view ---------------------------------------------------------------------------
  function outcome(e) { return h("span", { class: e.outcome }, e.outcome); }
  function episodeKey(e) { return `${e.group}:${e.traj}`; }
  function renderEpisodes(root) {
    const f = file(), m = f.meta || {};
    root.append(h("div", { class: "meta", id: "file-meta" },
      `${run().label} · ${fileLabel(f)} · ${m.env || ""}` + (m.credit ? ` · credit ${m.credit}` : "") +
      (m.agent ? ` · agent ${m.agent}` : "") + ` · ${f.episodes.length} episodes, ${stepCount(f)} steps`));
    const groups = new Map();
    for (const e of f.episodes) {
      if (!groups.has(e.group)) groups.set(e.group, []);
      groups.get(e.group).push(e);
    }
    let shown = 0;
    for (const [g, eps] of groups) {
      const visible = eps.filter(passes);
      if (!visible.length) continue;
      shown += visible.length;
      const returns = eps.map((e) => e.return);
      const mean = returns.reduce((a, b) => a + b, 0) / returns.length;
      const first = eps[0];
      root.append(h("div", { class: "group", "data-group": g },
        h("h4", {}, isTrain(f) ? `group ${g}` : `task ${first.task_id}`,
          h("span", { class: "muted" }, ` · task ${first.task_id} · ${first.category} · ${eps.length} episode(s) · mean return ${f3(mean)}`)),
        h("table", {},
          h("tr", {}, ...["traj", "agent", "outcome", "return", "steps", "invalid", "task"].map((c) => h("th", {}, c))),
          ...visible.map((e) => h("tr", {
            class: "episode" + (S.traj === episodeKey(e) ? " on" : ""), "data-traj": e.traj, "data-group": e.group,
            on: { click: () => { S.traj = episodeKey(e); S.step = S.token = null; render(); } } },
          h("td", {}, e.traj), h("td", {}, e.agent || (e.agents || []).join(", ") || ""), h("td", {}, outcome(e)),
          h("td", {}, f3(e.return)), h("td", {}, e.steps.length), h("td", {}, e.invalid_actions), h("td", {}, e.task_id))))));
    }
    if (!shown) root.append(h("p", { class: "muted" }, "No episode passes the filters."));
    const ep = f.episodes.find((e) => episodeKey(e) === S.traj);
    if (ep) {
      const detail = h("div", { id: "detail" });
      const epEl = h("div", { id: "episode" });
      renderEpisode(epEl, ep, f, true);
      const aside = h("div", { id: "aside" });
      renderAside(aside, ep, f);
      detail.append(epEl, aside);
      root.append(detail);
    }
  }

  function renderEpisode(root, ep, f, interactive) {
    const scale = fileScale(f);
    root.append(h("h3", {}, `episode ${ep.traj}`, ep.agent ? ` (${ep.agent})` : "", " · ", outcome(ep),
      h("span", { class: "muted" }, ` · task ${ep.task_id} · ${ep.category} · return ${f3(ep.return)} · score ${f3(ep.score)}` +
        (ep.error ? ` · ${ep.error}` : ""))));
    if (ep.game !== undefined) {  // one agent's view of a game: the other agents' views of it
      const others = f.episodes.filter((e) => e.game === ep.game && e !== ep);
      root.append(h("div", { class: "meta game" }, `game ${ep.game}; the other agents' views: `,
        ...others.map((e) => h("a", { href: "#", "data-traj": e.traj, on: interactive ? { click: (ev) => {
          ev.preventDefault(); S.traj = episodeKey(e); S.step = S.token = null; render(); } } : {} },
          `${e.agent} (traj ${e.traj}, ${e.outcome}) `))));
    }
    ep.steps.forEach((s, i) => root.append(renderStep(ep, s, i, f, scale, interactive)));
  }

  function renderStep(ep, s, i, f, scale, interactive) {
    const on = interactive && S.step === i;
    const t = s.tokens;
    const toks = t ? h("div", { class: "tokens" }, ...t.text.map((txt, j) => {
      const cls = ["tok"];
      if (t.clipped && t.clipped[j]) cls.push("clipped");
      if (t.in_loss && t.in_loss[j] === false) cls.push("out");
      if (interactive && S.step === i && S.token === j) cls.push("sel");
      return h("span", { class: cls.join(" "), "data-j": j, "data-adv": t.advantage ? num(t.advantage[j]) : null,
        style: `background:${tokenColour(t, j, scale)}`,
        title: `advantage ${num(t.advantage ? t.advantage[j] : null)} · engine ${num(t.engine_logprob[j])} · learner ${num(t.learner_logprob ? t.learner_logprob[j] : null)}`,
        on: interactive ? { click: (ev) => { ev.stopPropagation(); S.step = i; S.token = j; render(); } } : {} }, txt);
    })) : null;
    const c = s.credit || {};
    return h("div", { class: "step" + (on ? " on" : ""), "data-t": s.t,
                      on: interactive ? { click: () => { S.step = i; S.token = null; render(); } } : {} },
      h("div", { class: "head" },
        h("strong", {}, `t=${s.t}`),
        s.agent ? h("span", { class: "badge agent" }, s.agent) : null,
        h("span", {}, h("span", { class: "k" }, "action "), s.action === null ? h("em", {}, "none") : s.action),
        s.valid ? null : h("span", { class: "badge invalid", title: s.why_invalid }, `invalid: ${s.why_invalid}`),
        h("span", {}, h("span", { class: "k" }, "reward "), num(s.reward)),
        s.advantage !== undefined ? h("span", {}, h("span", { class: "k" }, "advantage "), h("span", { class: "adv" }, num(s.advantage))) : null,
        c.anchor_size !== undefined ? h("span", { class: "muted" }, `anchor group of ${c.anchor_size}`) : null,
        h("span", { class: "muted" }, `state ${typeof s.state_key === "string" ? s.state_key : JSON.stringify(s.state_key)}`)),
      h("pre", { class: "obs" }, s.observation),
      s.response_text ? h("div", {}, h("span", { class: "k" }, "response "), h("code", {}, s.response_text)) : null,
      toks,
      on && s.prompt_text ? h("details", {}, h("summary", {}, `prompt (${s.prompt_tokens} tokens)`), h("pre", {}, s.prompt_text)) : null);
  }

  function renderAside(root, ep, f) {
    const s = S.step !== null ? ep.steps[S.step] : null;
    if (s && S.token !== null && s.tokens) {
      const t = s.tokens, j = S.token;
      const row = (k, v, cls) => h("tr", {}, h("th", {}, k), h("td", { class: cls }, v));
      root.append(h("div", { class: "panel", id: "token-detail" }, h("h4", {}, "token"),
        h("table", {},
          row("text", JSON.stringify(t.text[j])),
          row("advantage", num(t.advantage ? t.advantage[j] : null), "adv"),
          row("engine log-prob", num(t.engine_logprob[j])),
          row("learner log-prob", num(t.learner_logprob ? t.learner_logprob[j] : null)),
          row("gap (learner − engine)", f3(tokenGap(t, j))),
          row("π_old log-prob", num(t.old_logprob ? t.old_logprob[j] : null)),
          row("ratio", num(t.ratio ? t.ratio[j] : null)),
          row("clipped", t.clipped ? String(t.clipped[j]) : "–"),
          row("in the loss", t.in_loss ? String(t.in_loss[j]) : "–"),
          row("weight version", t.version ? num(t.version[j]) : "–"))));
    }
    if (s) root.append(renderGroupPanel(ep, s, f));
    else root.append(h("div", { class: "panel muted" }, "Click a step to see its groups, a token for its values."));
  }

  function renderGroupPanel(ep, s, f) {
    const c = s.credit || {};
    const panel = h("div", { class: "panel", id: "group-panel" }, h("h4", {}, `step t=${s.t}: credit`));
    if (s.advantage !== undefined) {
      const comps = Object.entries(c).filter(([k]) => k.startsWith("component_"));
      panel.append(h("div", {}, `advantage ${num(s.advantage)}`,
        comps.length ? h("span", { class: "muted" }, " = " + comps.map(([k, v]) => `${k.slice(10)} ${f3(v)}`).join(" + ")) : null));
    }
    // the episode group: the other rollouts of the task and their returns
    const members = f.episodes.filter((e) => e.group === ep.group);
    panel.append(h("h4", {}, `episode group (${members.length} rollouts)`),
      c.episode_baseline !== undefined ? h("div", { class: "muted" }, `baseline ${f3(c.episode_baseline)}`)
        : c.episode_mean_return !== undefined ? h("div", { class: "muted" }, `mean return ${f3(c.episode_mean_return)} (no episode baseline in this module)`) : null,
      h("table", { class: "members" }, h("tr", {}, h("th", {}, "traj"), h("th", {}, "return"), h("th", {}, "outcome")),
        ...members.map((e) => h("tr", { class: e === ep ? "on" : null, style: e === ep ? "font-weight:600" : null },
          h("td", {}, e.traj), h("td", {}, f3(e.return)), h("td", {}, outcome(e))))));
    const sameGroup = (key) => {
      const out = [];
      for (const e of members) for (const st of e.steps) if (st.credit && st.credit[key] === c[key]) out.push([e, st]);
      return out;
    };
    if (c.anchor_group !== undefined) {
      const anchor = sameGroup("anchor_group");
      panel.append(h("h4", {}, `anchor-state group (${c.anchor_size} steps)`),
        h("div", { class: "muted" }, `this step's return-to-go ${f3(c.step_return)}, group mean ${f3(c.anchor_baseline)}`),
        h("table", { class: "anchor" }, h("tr", {}, ...["traj", "t", "action", "return-to-go", "advantage"].map((x) => h("th", {}, x))),
          ...anchor.map(([e, st]) => h("tr", { style: st === s ? "font-weight:600" : null },
            h("td", {}, e.traj), h("td", {}, st.t), h("td", {}, st.action || "–"),
            h("td", {}, f3(st.credit.step_return)), h("td", {}, f3(st.advantage))))));
    }
    for (let k = 1; c[`history_k${k}_group`] !== undefined; k++) {
      const key = `history_k${k}_group`;
      if (c[key] < 0) { panel.append(h("div", { class: "muted" }, `history depth ${k}: too early`)); continue; }
      const same = sameGroup(key);
      panel.append(h("h4", {}, `history group, depth ${k} (${c[`history_k${k}_size`]} steps)`),
        h("div", { class: "muted" }, same.map(([e, st]) => `traj ${e.traj} t=${st.t} G=${f3(st.credit.step_return)}`).join(" · ")));
    }
    return panel;
  }

  // -- compare view ----------------------------------------------------------------------------
  function evalFiles() {
    const out = [];
    RUNS.forEach((r, ri) => r.files.forEach((f, fi) => { if (!isTrain(f)) out.push([ri, fi]); }));
    return out;
  }
  function renderCompare(root) {
    const all = evalFiles();
    if (!all.length) { root.append(h("p", { class: "muted" }, "No evaluation traces to compare.")); return; }
    if (!S.cmp) {  // two runs: their last evaluations; one run: its first and last evaluation
      const tasks = ([ri, fi]) => new Set(RUNS[ri].files[fi].episodes.map((e) => e.task_id));
      const shared = (a, b) => { const t = tasks(b); return [...tasks(a)].some((x) => t.has(x)); };
      const pairs = [];
      for (let i = all.length - 1; i >= 0; i--) for (let j = all.length - 1; j >= 0; j--) {
        if (all[i][0] > all[j][0]) pairs.push([all[j], all[i]]);
      }
      for (let j = 0; j < all.length; j++) for (let i = all.length - 1; i > j; i--) pairs.push([all[j], all[i]]);
      const pick = pairs.find(([a, b]) => shared(a, b)) || [all[0], all[all.length - 1]];
      S.cmp = { left: pick[0], right: pick[1], task: null };
    }
    const pick = (side) => h("select", { id: `cmp-${side}`, on: { change: (ev) => { S.cmp[side] = all[+ev.target.value]; render(); } } },
      ...all.map(([ri, fi], k) => {
        const opt = h("option", { value: k }, `${RUNS[ri].label} · ${fileLabel(RUNS[ri].files[fi])}`);
        if (S.cmp[side][0] === ri && S.cmp[side][1] === fi) opt.selected = true;
        return opt;
      }));
    const fileOf = (side) => RUNS[S.cmp[side][0]].files[S.cmp[side][1]];
    const L = fileOf("left"), R = fileOf("right");
    const ids = L.episodes.map((e) => e.task_id).filter((id) => R.episodes.some((e) => e.task_id === id));
    if (!ids.includes(S.cmp.task)) S.cmp.task = ids[0] || null;
    const task = h("select", { id: "cmp-task", on: { change: (ev) => { S.cmp.task = ev.target.value; render(); } } },
      ...ids.map((id) => { const o = h("option", { value: id }, id); if (id === S.cmp.task) o.selected = true; return o; }));
    root.append(h("div", { class: "meta" }, "left ", pick("left"), "  right ", pick("right"), "  task ", task,
      ` (${ids.length} tasks in both)`));
    if (!S.cmp.task) { root.append(h("p", { class: "muted" }, "The two traces share no task.")); return; }
    const cols = h("div", { class: "compare" });
    for (const [side, f] of [["left", L], ["right", R]]) {
      const col = h("div", { "data-side": side });
      const ep = f.episodes.find((e) => e.task_id === S.cmp.task);
      col.append(h("div", { class: "muted" }, `${RUNS[S.cmp[side][0]].label} · ${fileLabel(f)}`));
      renderEpisode(col, ep, f, false);
      cols.append(col);
    }
    root.append(cols);
  }

  // -- curves ----------------------------------------------------------------------------------
  function renderCurves(root) {
    const keys = [];
    for (const r of RUNS) for (const k of Object.keys(r.curves || {})) if (!keys.includes(k)) keys.push(k);
    if (!keys.length) { root.append(h("p", { class: "muted" }, "No metrics.jsonl next to these traces.")); return; }
    root.append(h("div", { class: "meta" }, ...RUNS.map((r, i) =>
      h("span", {}, h("span", { class: "swatch", style: `background:${COLOURS[i % COLOURS.length]}` }), r.label, "  "))));
    const box = h("div", { class: "curves" });
    for (const k of keys) box.append(curve(k));
    root.append(box);
  }
  function curve(key) {
    const W = 340, H = 190, P = { l: 44, r: 10, t: 10, b: 26 };
    const series = RUNS.map((r) => (r.curves || {})[key] || []);
    const pts = series.flat();
    let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
    let y0 = Math.min(...pts.map((p) => p[1])), y1 = Math.max(...pts.map((p) => p[1]));
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    const X = (x) => P.l + (x - x0) / (x1 - x0) * (W - P.l - P.r);
    const Y = (y) => H - P.b - (y - y0) / (y1 - y0) * (H - P.t - P.b);
    const NS = "http://www.w3.org/2000/svg";
    const el = (tag, attrs, text) => {
      const e = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text !== undefined) e.textContent = text;
      return e;
    };
    const svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-key": key });
    svg.append(el("line", { x1: P.l, y1: H - P.b, x2: W - P.r, y2: H - P.b, stroke: "#999" }),
      el("line", { x1: P.l, y1: P.t, x2: P.l, y2: H - P.b, stroke: "#999" }),
      el("text", { x: P.l - 4, y: Y(y1) + 4, "text-anchor": "end", "font-size": 10 }, f3(y1)),
      el("text", { x: P.l - 4, y: Y(y0), "text-anchor": "end", "font-size": 10 }, f3(y0)),
      el("text", { x: P.l, y: H - 8, "font-size": 10 }, String(x0)),
      el("text", { x: W - P.r, y: H - 8, "text-anchor": "end", "font-size": 10 }, `iteration ${x1}`));
    series.forEach((s, i) => {
      if (!s.length) return;
      const colour = COLOURS[i % COLOURS.length];
      svg.append(el("polyline", { points: s.map((p) => `${X(p[0])},${Y(p[1])}`).join(" "), fill: "none", stroke: colour, "stroke-width": 1.5 }));
      if (s.length < 40) for (const p of s) svg.append(el("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: colour }));
    });
    return h("div", { class: "curve" }, h("h4", {}, key), svg);
  }

  // -- the page --------------------------------------------------------------------------------
  function render() {
    renderRuns();
    renderFiles();
    legend();
    const root = document.getElementById("content");
    root.replaceChildren();
    if (S.view === "compare") renderCompare(root);
    else if (S.view === "curves") renderCurves(root);
    else renderEpisodes(root);
  }
  for (const b of document.querySelectorAll("#views button")) {
    b.addEventListener("click", () => { S.view = b.dataset.view; render(); });
  }
  document.getElementById("colour").addEventListener("change", (ev) => { S.colour = ev.target.value; render(); });
  for (const id of ["f-category", "f-outcome", "f-agent", "f-invalid"]) {
    document.getElementById(id).addEventListener("change", render);
  }
  fillFilters();
  render();
})();
