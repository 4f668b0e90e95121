// fastbean console: live charts on the overview, live search progress,
// and a confirmation before destructive actions. The pages work without it.
"use strict";

(function () {
  const HISTORY = 300;            // samples a chart shows: 5 minutes at 1 s

  function confirmForms() {
    for (const form of document.querySelectorAll("form[data-confirm]")) {
      form.addEventListener("submit", (e) => {
        if (!window.confirm(form.dataset.confirm)) e.preventDefault();
      });
    }
  }

  // -- charts ------------------------------------------------------------------

  function palette() {
    const style = getComputedStyle(document.documentElement);
    const colors = [];
    for (let i = 0; i < 5; i++) colors.push(style.getPropertyValue("--c" + i).trim() || "#888");
    return {colors, grid: style.getPropertyValue("--grid").trim() || "#ccc",
            text: style.getPropertyValue("--muted").trim() || "#666"};
  }

  function shortNumber(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
    if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (n >= 1e4) return (n / 1e3).toFixed(0) + "k";
    return String(Math.round(n));
  }

  function draw(canvas, samples) {
    const series = canvas.dataset.series.split(" ");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 600, height = canvas.clientHeight || 160;
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const p = palette();
    let top = 1;
    for (const s of samples) for (const name of series) top = Math.max(top, s[name] || 0);
    const left = 40, bottom = height - 4, span = width - left - 4;
    ctx.strokeStyle = p.grid;
    ctx.fillStyle = p.text;
    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 2; i++) {
      const y = 6 + (bottom - 6) * i / 2;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(width - 4, y); ctx.stroke();
      ctx.fillText(shortNumber(top * (2 - i) / 2), 2, y + 4);
    }
    const step = span / (HISTORY - 1);
    const start = HISTORY - samples.length;
    series.forEach((name, k) => {
      ctx.strokeStyle = name === "max_memory" ? p.colors[4] : p.colors[k % 5];
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      samples.forEach((s, i) => {
        const x = left + (start + i) * step;
        const y = bottom - ((s[name] || 0) / top) * (bottom - 6);
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
    });
    const last = samples[samples.length - 1] || {};
    canvas.dataset.last = series.map((name) => name + "=" + (last[name] || 0)).join(" ");
  }

  function overview() {
    const charts = document.getElementById("charts");
    if (!charts) return;
    const canvases = charts.querySelectorAll("canvas");
    let samples = [];
    const redraw = () => {
      for (const c of canvases) draw(c, samples);
      charts.dataset.samples = String(samples.length);
      const last = samples[samples.length - 1];
      if (!last) return;
      for (const name of ["ready", "delayed", "reserved", "buried", "connections", "memory"]) {
        const el = document.getElementById("n-" + name);
        if (el) el.textContent = String(last[name]);
      }
    };
    const add = (sample) => {
      samples.push(sample);
      if (samples.length > HISTORY) samples = samples.slice(samples.length - HISTORY);
      redraw();
    };
    fetch("/history.json", {credentials: "same-origin"})
      .then((r) => r.ok ? r.json() : [])
      .then((list) => { samples = list.concat(samples).slice(-HISTORY); redraw(); })
      .catch(() => {});
    const events = new EventSource("/events");
    events.onmessage = (e) => add(JSON.parse(e.data));
    window.addEventListener("resize", redraw);
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redraw);
  }

  // -- search ------------------------------------------------------------------

  function cell(row, text, cls, href) {
    const td = row.insertCell();
    if (cls) td.className = cls;
    if (href) {
      const a = document.createElement("a");
      a.href = href;
      a.textContent = text;
      td.appendChild(a);
    } else {
      td.textContent = text;
    }
  }

  function search() {
    const status = document.getElementById("search-status");
    if (!status || status.dataset.state !== "running") return;
    const progress = document.getElementById("search-progress");
    const summary = document.getElementById("search-summary");
    const body = document.querySelector("#results tbody");
    const poll = () => {
      fetch(status.dataset.json, {credentials: "same-origin"}).then((r) => r.ok ? r.json() : null).then((s) => {
        if (!s) return;
        progress.max = s.total || 1;
        progress.value = s.scanned;
        summary.textContent = s.state + ": " + s.matches + (s.matches === 1 ? " match, " : " matches, ") +
          s.scanned + " of " + s.total + " jobs looked at in " + s.elapsed + " s" + (s.error ? " (" + s.error + ")" : "");
        status.dataset.state = s.state;
        body.replaceChildren();
        for (const r of s.rows) {
          const row = body.insertRow();
          cell(row, String(r.id), "num", "/jobs/" + r.id);
          cell(row, r.tube, "", "/tubes/" + encodeURIComponent(r.tube));
          cell(row, r.state);
          cell(row, String(r.pri), "num");
          cell(row, String(r.age), "num");
          cell(row, String(r.size), "num");
          cell(row, r.head, "body");
        }
        if (s.state === "running") {
          setTimeout(poll, 300);
        } else {
          const cancel = document.getElementById("search-cancel");
          if (cancel) cancel.remove();
        }
      }).catch(() => setTimeout(poll, 1000));
    };
    setTimeout(poll, 200);
  }

  document.addEventListener("DOMContentLoaded", () => {
    confirmForms();
    overview();
    search();
  });
})();
