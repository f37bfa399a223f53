// The run report's two interactive parts, drawn from the JSON in #report-data:
// - the transcript browser of text agents (episode list; per turn what the model saw, its
//   internal state, its action, the observation, and the tokens kept vs dropped);
// - the replay of grid and navigation trials (a canvas, a step slider, play/pause).
// Plain DOM code with no libraries, so the report works offline from a single file.
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("report-data").textContent);

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "cls") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children || []) if (child) node.appendChild(child);
    return node;
  }

  function fmt(value) {
    if (value === null || value === undefined) return "–";
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    const magnitude = Math.abs(value);
    if (magnitude >= 1e-3 && magnitude < 1e6) {
      const digits = Math.max(0, 3 - Math.floor(Math.log10(magnitude)));
      return value.toLocaleString("en-US", {
        minimumFractionDigits: digits, maximumFractionDigits: digits,
      });
    }
    return value === 0 ? "0" : value.toExponential(3);
  }

  // ---- transcripts --------------------------------------------------------------------------

  function tagText(text, tag) {
    if (!tag) return null;
    const match = new RegExp("<" + tag + ">([\\s\\S]*?)</" + tag + ">").exec(text);
    return match ? match[1].trim() : null;
  }

  function keptText(text, scratch) {
    if (!scratch) return text;
    return text.replace(new RegExp("<" + scratch + ">[\\s\\S]*?</" + scratch + ">"), "");
  }

  function textBlock(label, text, cls) {
    return el("div", {}, [
      el("div", { cls: "label", text: label }),
      el("div", { cls: "text " + (cls || ""), text: text }),
    ]);
  }

  function tokenBar(kept, dropped) {
    if (kept === null) return null;
    const total = kept + (dropped || 0);
    const bar = el("div", { cls: "bar", title: "kept " + kept + ", dropped " + (dropped || 0) });
    const keptPart = el("div", { cls: "kept" });
    keptPart.style.width = (100 * kept / Math.max(1, total)) + "%";
    const droppedPart = el("div", { cls: "dropped" });
    droppedPart.style.width = (100 * (dropped || 0) / Math.max(1, total)) + "%";
    bar.appendChild(keptPart);
    bar.appendChild(droppedPart);
    return bar;
  }

  function turnRange(a, b) {
    return a === b ? "turn " + a : "turns " + a + "–" + b;
  }

  function renderTurn(episode, j, info) {
    const turn = episode.turns[j];
    const window = info.window;  // null: every earlier turn stays in the context
    const first = window === null ? 0 : Math.max(0, j - window);
    const tokens = turn.kept_tokens === null
      ? (turn.context_tokens === null ? "" : turn.context_tokens + " tokens in context")
      : turn.kept_tokens + " tokens kept, " + (turn.dropped_tokens || 0) + " dropped";
    const card = el("div", { cls: "turn" }, [
      el("h4", { text: "Turn " + (j + 1) + (tokens ? " · " + tokens : "") }),
      tokenBar(turn.kept_tokens, turn.dropped_tokens),
    ]);

    const seen = el("details", {}, [
      el("summary", {
        text: "Context the model saw: the prompt" +
          (j > first ? " + " + turnRange(first + 1, j) : "") +
          (first > 0 ? " (" + turnRange(1, first) + " dropped)" : ""),
      }),
      textBlock("prompt", episode.prompt),
    ]);
    for (let t = first; t < j; t++) {
      const earlier = episode.turns[t];
      seen.appendChild(textBlock("turn " + (t + 1) + ": state and action",
        keptText(earlier.generated, info.scratch)));
      if (earlier.observation) seen.appendChild(textBlock("turn " + (t + 1) + ": observation",
        earlier.observation));
    }
    card.appendChild(seen);
    if (first > 0) {
      const dropped = el("details", {}, [
        el("summary", { text: "Dropped from the context: " + turnRange(1, first) }),
      ]);
      for (let t = 0; t < first; t++) {
        dropped.appendChild(textBlock("turn " + (t + 1), episode.turns[t].generated +
          (episode.turns[t].observation ? "\n" + episode.turns[t].observation : "")));
      }
      card.appendChild(dropped);
    }

    const state = tagText(turn.generated, info.state_tag);
    if (state !== null) card.appendChild(textBlock("internal state", state, "state"));
    let action = null;
    for (const tag of info.action_tags) {
      const found = tagText(turn.generated, tag);
      if (found !== null) { action = tag + ": " + found; break; }
    }
    card.appendChild(textBlock(action === null ? "generated" : "action",
      action === null ? turn.generated : action, "action"));
    if (action !== null) {
      const raw = el("details", {}, [el("summary", { text: "full generated text" }),
        el("div", { cls: "text", text: turn.generated })]);
      card.appendChild(raw);
    }
    if (turn.observation) card.appendChild(textBlock("observation", turn.observation));
    return card;
  }

  function renderEpisode(view, episode, info) {
    view.replaceChildren();
    const facts = [];
    for (const [key, value] of Object.entries(episode.outcome)) facts.push(key + " " + fmt(value));
    for (const [key, value] of Object.entries(episode.memory)) {
      facts.push(key.replace(/_/g, " ") + " " + fmt(value));
    }
    view.appendChild(el("h3", { text: "Episode " + episode.id }));
    view.appendChild(el("p", { cls: "note", text: facts.join(" · ") }));
    if (episode.answer !== null && episode.answer !== undefined) {
      view.appendChild(el("p", { cls: "note", text: "expected answer: " + JSON.stringify(episode.answer) }));
    }
    episode.turns.forEach((_, j) => view.appendChild(renderTurn(episode, j, info)));
    if (!episode.turns.length) view.appendChild(el("p", { text: "(no turns recorded)" }));
  }

  function setupTranscripts(info) {
    const list = document.getElementById("episode-list");
    const view = document.getElementById("episode-view");
    if (!list || !view) return;
    info.episodes.forEach((episode, index) => {
      const o = episode.outcome;
      const good = (o.em !== undefined ? o.em : o.reward) > 0;
      const parts = [];
      if (o.reward !== undefined) parts.push("reward " + fmt(o.reward));
      if (o.em !== undefined) parts.push("EM " + fmt(o.em));
      if (o.f1 !== undefined) parts.push("F1 " + fmt(o.f1));
      parts.push(episode.turns.length + " turns");
      if (episode.memory.peak_tokens !== undefined) parts.push("peak " + fmt(episode.memory.peak_tokens));
      const item = el("li", { "data-index": String(index) }, [
        el("span", { cls: good ? "ok" : "bad", text: (good ? "✓ " : "✗ ") + episode.id }),
        el("div", { cls: "note", text: parts.join(" · ") }),
      ]);
      item.addEventListener("click", () => {
        for (const other of list.children) other.classList.remove("selected");
        item.classList.add("selected");
        renderEpisode(view, episode, info);
      });
      list.appendChild(item);
    });
    if (list.firstChild) list.firstChild.click();
  }

  // ---- replays ------------------------------------------------------------------------------

  const CANVAS_PX = 400;

  function drawKeyDoor(ctx, trial, t) {
    const size = trial.size;
    const cell = Math.floor(CANVAS_PX / size);
    const at = (x, y) => [x * cell, (size - 1 - y) * cell];  // y grows upwards
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, CANVAS_PX, CANVAS_PX);
    ctx.strokeStyle = "#d5d9de";
    for (let i = 0; i <= size; i++) {
      ctx.beginPath(); ctx.moveTo(i * cell, 0); ctx.lineTo(i * cell, size * cell); ctx.stroke();
      ctx.beginPath(); ctx.moveTo(0, i * cell); ctx.lineTo(size * cell, i * cell); ctx.stroke();
    }
    const step = trial.steps[t];
    const inner = step[5];
    const mark = (pos, color, letter, faded) => {
      const [px, py] = at(pos[0], pos[1]);
      ctx.globalAlpha = faded ? 0.3 : 1;
      ctx.fillStyle = color;
      ctx.fillRect(px + 3, py + 3, cell - 6, cell - 6);
      ctx.fillStyle = "#1d232b";
      ctx.font = "bold " + Math.floor(cell / 3) + "px sans-serif";
      ctx.textAlign = "center"; ctx.textBaseline = "middle";
      ctx.fillText(letter, px + cell / 2, py + cell / 2);
      ctx.globalAlpha = 1;
    };
    mark(trial.start, "#cfe3f7", "S", false);
    mark(trial.door, "#c9a27e", "D", false);
    mark(trial.key, "#f4d35e", "K", step[2] === 1);
    // The path of the current inner episode so far: from the start cell to the agent.
    let from = t;
    while (from > 0 && trial.steps[from - 1][5] === inner) from--;
    const path = [trial.start];
    for (let s = from; s <= t; s++) path.push([trial.steps[s][0], trial.steps[s][1]]);
    ctx.strokeStyle = "rgba(200, 40, 40, 0.45)";
    ctx.lineWidth = Math.max(2, cell / 10);
    ctx.beginPath();
    path.forEach(([x, y], n) => {
      const [px, py] = at(x, y);
      if (n === 0) ctx.moveTo(px + cell / 2, py + cell / 2);
      else ctx.lineTo(px + cell / 2, py + cell / 2);
    });
    ctx.stroke();
    ctx.lineWidth = 1;
    const [ax, ay] = at(step[0], step[1]);
    ctx.beginPath();
    ctx.arc(ax + cell / 2, ay + cell / 2, cell / 4, 0, 2 * Math.PI);
    ctx.fillStyle = "#d62828";
    ctx.fill();
    if (step[2] === 1) { ctx.strokeStyle = "#e0a800"; ctx.lineWidth = 4; ctx.stroke(); ctx.lineWidth = 1; }
  }

  const HEADINGS = [[-1, 0], [0, 1], [1, 0], [0, -1]];  // (row, column) step: N, E, S, W

  function drawObjNav(ctx, trial, t) {
    const size = trial.size;
    const cell = Math.floor(CANVAS_PX / size);
    const step = trial.steps[t];
    const [row, col, heading, target, seen] = step;
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, CANVAS_PX, CANVAS_PX);
    for (let r = 0; r < size; r++) {
      for (let c = 0; c < size; c++) {
        const v = trial.grid[r][c];
        ctx.fillStyle = v === 0 ? "#e8e4da" : v === 1 ? "#3c3c46" : trial.colors[v - 2];
        ctx.fillRect(c * cell, r * cell, cell, cell);
        if (v - 2 === target) {
          ctx.strokeStyle = "#ffffff"; ctx.lineWidth = 2;
          ctx.strokeRect(c * cell + 1, r * cell + 1, cell - 2, cell - 2); ctx.lineWidth = 1;
        }
      }
    }
    ctx.fillStyle = "rgba(250, 220, 80, 0.45)";
    for (const [r, c] of seen) {
      if (r >= 0 && c >= 0 && r < size && c < size) ctx.fillRect(c * cell, r * cell, cell, cell);
    }
    const [dr, dc] = HEADINGS[heading];
    const cx = col * cell + cell / 2, cy = row * cell + cell / 2;
    ctx.beginPath();
    ctx.moveTo(cx + dc * cell * 0.45, cy + dr * cell * 0.45);
    ctx.lineTo(cx - dc * cell * 0.3 - dr * cell * 0.3, cy - dr * cell * 0.3 + dc * cell * 0.3);
    ctx.lineTo(cx - dc * cell * 0.3 + dr * cell * 0.3, cy - dr * cell * 0.3 - dc * cell * 0.3);
    ctx.closePath();
    ctx.fillStyle = "#d62828";
    ctx.fill();
  }

  function innerTable(trial) {
    const rows = new Map();
    for (let s = 1; s < trial.steps.length; s++) {
      const step = trial.steps[s];
      const k = step[step.length - 1];
      const reward = step[step.length - 2];
      const row = rows.get(k) || { steps: 0, ret: 0 };
      row.steps += 1; row.ret += reward;
      rows.set(k, row);
    }
    const body = el("tbody");
    for (const [k, row] of rows) {
      body.appendChild(el("tr", {}, [
        el("td", { text: String(k + 1) }), el("td", { text: String(row.steps) }),
        el("td", { text: fmt(row.ret) }),
      ]));
    }
    return el("table", { cls: "data", id: "replay-inner" }, [
      el("thead", {}, [el("tr", {}, [el("th", { text: "inner episode" }),
        el("th", { text: "steps" }), el("th", { text: "return" })])]),
      body,
    ]);
  }

  function setupReplay(trials) {
    const canvas = document.getElementById("replay-canvas");
    const picker = document.getElementById("replay-trial");
    const slider = document.getElementById("replay-step");
    const play = document.getElementById("replay-play");
    const status = document.getElementById("replay-status");
    const side = document.getElementById("replay-side");
    if (!canvas || !picker || !slider || !play || !status || !side) return;
    canvas.width = CANVAS_PX; canvas.height = CANVAS_PX;
    const ctx = canvas.getContext("2d");
    let trial = trials[0];
    let timer = null;

    function show() {
      const t = Number(slider.value);
      const step = trial.steps[t];
      if (trial.kind === "objnav") drawObjNav(ctx, trial, t); else drawKeyDoor(ctx, trial, t);
      let sum = 0;
      for (let s = 1; s <= t; s++) sum += trial.steps[s][trial.steps[s].length - 2];
      const inner = step[step.length - 1];
      status.replaceChildren();
      if (trial.kind === "objnav") {
        const swatch = el("span", { cls: "swatch" });
        swatch.style.background = trial.colors[step[3]];
        status.appendChild(swatch);
        status.appendChild(document.createTextNode("target · "));
      }
      status.appendChild(document.createTextNode(
        "step " + t + " / " + (trial.steps.length - 1) + " · inner episode " + (inner + 1) +
        " · return so far " + fmt(sum) + (step.length && step[step.length - 2] ? " · reward " +
        fmt(step[step.length - 2]) + " at this step" : "")));
    }

    function select(index) {
      trial = trials[index];
      slider.max = String(trial.steps.length - 1);
      slider.value = "0";
      side.replaceChildren(innerTable(trial));
      show();
    }

    trials.forEach((tr, index) => picker.appendChild(el("option", {
      value: String(index), text: "trial " + (index + 1) + " (eval episode " + (tr.episode + 1) +
        ", return " + fmt(tr.return) + ")",
    })));
    picker.addEventListener("change", () => { stop(); select(Number(picker.value)); });
    slider.addEventListener("input", show);

    function stop() {
      if (timer !== null) { clearInterval(timer); timer = null; }
      play.textContent = "▶ play";
    }
    play.addEventListener("click", () => {
      if (timer !== null) { stop(); return; }
      if (Number(slider.value) >= Number(slider.max)) slider.value = "0";
      play.textContent = "❚❚ pause";
      timer = setInterval(() => {
        if (Number(slider.value) >= Number(slider.max)) { stop(); return; }
        slider.value = String(Number(slider.value) + 1);
        show();
      }, 150);
    });
    for (const [id, delta] of [["replay-prev", -1], ["replay-next", 1]]) {
      const button = document.getElementById(id);
      if (button) button.addEventListener("click", () => {
        stop();
        slider.value = String(Math.min(Number(slider.max), Math.max(0, Number(slider.value) + delta)));
        show();
      });
    }
    select(0);
  }

  if (data.transcripts) setupTranscripts(data.transcripts);
  if (data.replays && data.replays.length) setupReplay(data.replays);
})();
