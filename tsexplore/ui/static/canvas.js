// tsexplore image canvas: the browser side of tsexplore.ui.canvas.ImageCanvas (anywidget ESM,
// no build step, nothing fetched). Frames arrive as binary uint8 colour indices (0 = NaN) with
// the region of the array they cover; the 256-colour table is applied here, so a colormap or
// display-range change repaints without asking the kernel. Pan and zoom move the current image
// at once and ask the kernel for the new region. One state per model (frames, view, colours);
// every rendered view of the model draws it.

const M = { left: 58, right: 14, top: 24, bottom: 40 };
const MAX_TILES = 256;

function bytesOf(b) {
  if (b == null) return new Uint8Array(0);
  return ArrayBuffer.isView(b) ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : new Uint8Array(b);
}

function palettes(model) {
  const names = model.get("palette_names") || [];
  const raw = bytesOf(model.get("palettes"));
  const out = new Map();
  names.forEach((name, k) => {
    const copy = new Uint8Array(1024);
    copy.set(raw.subarray(k * 1024, (k + 1) * 1024));
    out.set(name, new Uint32Array(copy.buffer)); // RGBA bytes = one little-endian u32
  });
  return out;
}

// The table that shows indices quantised over `fc` in the colours of range `dc`
// (tsexplore.ui._frames.compose_lut is the same arithmetic).
function composeLut(pal, fc, dc) {
  if (!dc || (dc[0] === fc[0] && dc[1] === fc[1])) return pal;
  const out = new Uint32Array(256);
  out[0] = pal[0];
  const lo = dc[0], k = 254 / (dc[1] - dc[0]);
  for (let i = 1; i < 256; i++) {
    const v = fc[0] + (i - 1) * (fc[1] - fc[0]) / 254;
    let j = (v - lo) * k;
    j = j < 0 ? 0 : j > 254 ? 254 : j;
    out[i] = pal[Math.floor(j + 0.5) + 1];
  }
  return out;
}

function make(tag, className) { const e = document.createElement(tag); e.className = className; return e; }

function niceStep(span, n) {
  const raw = Math.abs(span) / Math.max(1, n);
  const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  const f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

function fmt(v) {
  if (!isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-4)) return v.toExponential(2);
  return String(Number(v.toPrecision(6)));
}

class State {
  constructor(model) {
    this.model = model;
    this.views = new Set();
    this.base = null; // a kept overview layer, drawn under the others
    this.layers = [];
    this.gen = this.baseGen = -1;
    this.view = null; // {x0, x1, y0, y1}: edges in index coordinates
    this.pal = palettes(model);
    this.pendingAck = this.ackTimer = this.vpTimer = this.playTimer = null;
    this.vpSent = this.lastStep = 0;
    this.counts = { received: 0, painted: 0, stale: 0, bytes: 0 };
    this.last = null; // meta of the last painted frame
    this.playing = false;
    this.index = (model.get("slider") || {}).value ?? 0;
    model.on("msg:custom", (msg, buffers) => this.onMessage(msg, buffers));
    for (const name of ["cmap", "clim", "y_origin"]) model.on(`change:${name}`, () => this.recolour());
    model.on("change:palettes", () => { this.pal = palettes(model); this.recolour(); });
    // new axes or a new size: show the whole plane again, and tell the kernel
    for (const name of ["x_axis", "y_axis", "width", "height"]) model.on(`change:${name}`, () => this.resetView());
    model.on("change:title", () => this.drawAll());
    model.on("change:slider", () => this.views.forEach((v) => v.buildSlider()));
    const v0 = model.get("view0") || {};
    if (v0.x && v0.y) this.view = this.fit({ x0: v0.x[0], x1: v0.x[1], y0: v0.y[0], y1: v0.y[1] });
    this.send({ type: "ready", ...this.viewport() });
  }

  // -- geometry ---------------------------------------------------------------------------
  full() {
    const ny = (this.model.get("y_axis") || {}).size || 1, nx = (this.model.get("x_axis") || {}).size || 1;
    return { y0: -0.5, y1: ny - 0.5, x0: -0.5, x1: nx - 0.5 };
  }
  box() { return { w: this.model.get("width"), h: this.model.get("height") }; }
  fit(e) { // widen e to square pixels on the plot box (tsexplore.ui._frames.fit_view)
    const { w, h } = this.box();
    if (this.model.get("aspect") !== "equal") return { ...e };
    const per = Math.max((e.y1 - e.y0) / h, (e.x1 - e.x0) / w);
    const cy = (e.y0 + e.y1) / 2, cx = (e.x0 + e.x1) / 2;
    return { y0: cy - per * h / 2, y1: cy + per * h / 2, x0: cx - per * w / 2, x1: cx + per * w / 2 };
  }
  resetView(notify = true) {
    this.view = this.fit(this.full());
    if (notify) this.viewChanged();
  }
  viewport() {
    if (!this.view) this.resetView(false);
    const v = this.view, { w, h } = this.box(), dpr = window.devicePixelRatio || 1;
    const ny = (this.model.get("y_axis") || {}).size || 1, nx = (this.model.get("x_axis") || {}).size || 1;
    return { x: [v.x0, v.x1], y: [v.y0, v.y1], width: Math.round(w * dpr), height: Math.round(h * dpr), ny, nx };
  }
  viewChanged() { // redraw now, tell the kernel soon (at most one message per 40 ms)
    this.drawAll();
    if (!this.vpTimer) this.vpTimer = setTimeout(() => {
      this.vpTimer = null; this.vpSent = performance.now(); this.send({ type: "viewport", ...this.viewport() });
    }, Math.max(0, 40 - (performance.now() - this.vpSent)));
  }

  // -- messages -----------------------------------------------------------------------------
  send(content) {
    if (this.pendingAck) { // piggyback the held ack
      Object.assign(content, { ack: this.pendingAck.seq, held: performance.now() - this.pendingAck.t });
      this.pendingAck = null; clearTimeout(this.ackTimer);
    }
    this.model.send(content);
  }
  flushAck() { if (this.pendingAck) this.send({ type: "ack" }); }
  onMessage(msg, buffers) {
    const t = performance.now();
    if (msg.type === "frame") {
      this.counts.received++;
      const bytes = bytesOf(buffers && buffers[0]);
      this.counts.bytes += bytes.byteLength;
      this.flushAck(); // a held ack belongs to an older frame
      this.pendingAck = { seq: msg.seq, t };
      if (msg.ack !== "lazy") this.flushAck();
      else this.ackTimer = setTimeout(() => this.flushAck(), this.model.get("lazy_ack_ms"));
      // with the tiles that travelled along (``more``), added in their order
      let done = Promise.resolve();
      [[msg, bytes], ...(msg.more || []).map((part, k) => [{ ...msg, ...part }, bytesOf(buffers[k + 1])])]
        .forEach(([m, b], k) => {
          if (k) this.counts.bytes += b.byteLength;
          done = done.then(() => this.decode(m, b)).then((idx) => this.addFrame(m, idx));
        });
    } else if (msg.type === "ack?") {
      this.flushAck();
    } else if (msg.type === "view") {
      this.view = this.fit({ x0: msg.x[0], x1: msg.x[1], y0: msg.y[0], y1: msg.y[1] });
      this.viewChanged(); // the kernel learns the view as fitted to the screen
    } else if (msg.type === "index") {
      this.index = msg.value;
      this.views.forEach((v) => v.showIndex());
    } else if (msg.type === "hover") {
      this.views.forEach((v) => v.showExact(msg));
    } else if (msg.type === "clear") {
      this.layers = []; this.base = null; this.drawAll();
    }
  }
  async decode(msg, bytes) {
    const [h, w] = msg.shape;
    if (msg.encoding === "raw") return bytes;
    const type = msg.encoding === "png" ? "image/png" : "image/webp";
    const bmp = await createImageBitmap(new Blob([bytes], { type }),
      { colorSpaceConversion: "none", premultiplyAlpha: "none" });
    const c = new OffscreenCanvas(w, h), g = c.getContext("2d", { willReadFrequently: true });
    g.drawImage(bmp, 0, 0);
    const rgba = g.getImageData(0, 0, w, h).data, out = new Uint8Array(w * h);
    for (let i = 0; i < out.length; i++) out[i] = rgba[4 * i];
    bmp.close();
    return out;
  }
  addFrame(msg, idx) {
    const mode = msg.mode || "replace";
    if ((mode === "base" && msg.gen < this.baseGen) || (mode !== "base" && msg.gen < this.gen)) {
      this.counts.stale++;
      return;
    }
    const [h, w] = msg.shape, [[y0, y1], [x0, x1]] = msg.extent;
    // a frame replacing one of its size reuses its pixels (no 2 x 4 bytes/pixel of garbage a frame)
    const old = mode === "replace" && this.layers.length === 1 ? this.layers[0] : null;
    const same = old && old.w === w && old.h === h;
    const canvas = same ? old.canvas : new OffscreenCanvas(Math.max(1, w), Math.max(1, h));
    const img = same ? old.img : new ImageData(Math.max(1, w), Math.max(1, h));
    const layer = { gen: msg.gen, seq: msg.seq, w, h, idx, clim: msg.clim, canvas, img, extent: { y0, y1, x0, x1 } };
    this.colour(layer);
    if (mode === "base") { // a newer picture's overview: the older picture goes
      this.base = layer; this.baseGen = msg.gen;
      if (msg.gen > this.gen) { this.layers = []; this.gen = msg.gen; }
    }
    else if (mode === "tile" && msg.gen === this.gen) {
      this.layers.push(layer);
      if (this.layers.length > MAX_TILES) this.layers.shift();
    } else { this.layers = [layer]; this.gen = msg.gen; }
    this.last = msg;
    this.counts.painted++;
    this.drawAll(msg);
    if (this.playing && (msg.index == null || msg.index === this.index)) this.stepLater();
  }

  // -- colour -------------------------------------------------------------------------------
  colour(layer) {
    const pal = this.pal.get(this.model.get("cmap")) || this.pal.values().next().value;
    if (!pal) return;
    const lut = composeLut(pal, layer.clim, this.model.get("clim"));
    const out = new Uint32Array(layer.img.data.buffer), idx = layer.idx, w = layer.w, h = layer.h;
    if (this.model.get("y_origin") === "lower") { // row 0 (lowest y index) at the bottom
      for (let r = 0; r < h; r++) {
        const s = r * w, d = (h - 1 - r) * w;
        for (let c = 0; c < w; c++) out[d + c] = lut[idx[s + c]];
      }
    } else {
      for (let i = 0; i < w * h; i++) out[i] = lut[idx[i]];
    }
    layer.canvas.getContext("2d").putImageData(layer.img, 0, 0);
  }
  recolour() {
    for (const l of [this.base, ...this.layers]) if (l) this.colour(l);
    this.drawAll();
  }
  drawAll(msg) { this.views.forEach((v) => v.draw(msg)); }

  // -- play (in the browser: the next step waits for the current one's frame) -----------------
  setIndex(value, fromUser = true) {
    const s = this.model.get("slider") || {};
    const n = s.size || 1;
    this.index = ((value % n) + n) % n;
    this.views.forEach((v) => v.showIndex());
    if (fromUser) this.send({ type: "index", dim: s.dim, value: this.index });
  }
  togglePlay() {
    this.playing = !this.playing; clearTimeout(this.playTimer);
    if (this.playing) this.step();
    this.views.forEach((v) => v.showIndex());
  }
  step() { this.lastStep = performance.now(); this.setIndex(this.index + 1); }
  stepLater() {
    const interval = (this.model.get("slider") || {}).interval ?? 100;
    clearTimeout(this.playTimer);
    this.playTimer = setTimeout(() => { if (this.playing) this.step(); },
      Math.max(0, interval - (performance.now() - this.lastStep)));
  }
}

class View {
  constructor(state, el) {
    this.s = state; this.el = el;
    el.classList.add("tse-canvas"); el.tabIndex = 0;
    this.canvas = make("canvas", "tse-canvas-plot");
    this.bar = make("div", "tse-canvas-bar");
    this.readout = make("span", "tse-canvas-readout"); this.bar.append(this.readout);
    this.info = make("div", "tse-canvas-info"); this.sliderRow = make("div", "tse-canvas-slider");
    el.append(this.canvas, this.bar, this.sliderRow, this.info);
    this.buildSlider();
    this.listen();
    this.draw();
    // a view made after frames came shows them: say so once it is in the page
    if (state.last) requestAnimationFrame(() => this.draw(state.last));
  }

  listen() {
    const c = this.canvas, s = this.s;
    let drag = null;
    c.addEventListener("pointerdown", (e) => {
      if (!this.inPlot(e)) return;
      drag = { x: e.offsetX, y: e.offsetY, view: { ...s.view }, moved: false };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener("pointermove", (e) => {
      this.hover(e);
      if (!drag) return;
      const dx = e.offsetX - drag.x, dy = e.offsetY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) this.pan(-dx, -dy, drag.view); // the picture follows the pointer
    });
    c.addEventListener("pointerup", (e) => { if (drag && !drag.moved) this.click(e); drag = null; });
    c.addEventListener("wheel", (e) => {
      if (!this.inPlot(e)) return;
      e.preventDefault();
      this.zoom(Math.pow(1.0015, e.deltaY), e.offsetX, e.offsetY);
    }, { passive: false });
    c.addEventListener("dblclick", () => s.resetView());
    c.addEventListener("pointerleave", () => { this.readout.textContent = ""; });
    // keys: the canvas's own, and none reaches JupyterLab's command-mode shortcuts
    this.el.addEventListener("keydown", (e) => {
      e.stopPropagation();
      const { w, h } = s.box();
      const k = e.key, slider = (s.model.get("slider") || {}).size;
      const onRange = e.target && e.target.type === "range";
      if (onRange && (k === "ArrowLeft" || k === "ArrowRight" || k === "Home" || k === "End")) return; // native
      let done = true;
      if (k === "ArrowRight" && slider) s.setIndex(s.index + 1);
      else if (k === "ArrowLeft" && slider) s.setIndex(s.index - 1);
      else if (k === "ArrowRight" || k === "ArrowLeft") this.pan((k === "ArrowRight" ? 0.1 : -0.1) * w, 0);
      else if (k === "ArrowUp" || k === "ArrowDown") this.pan(0, (k === "ArrowUp" ? -0.1 : 0.1) * h);
      else if (k === "+" || k === "=") this.zoom(1 / 1.25, M.left + w / 2, M.top + h / 2);
      else if (k === "-" || k === "_") this.zoom(1.25, M.left + w / 2, M.top + h / 2);
      else if (k === "0" || k === "Home") s.resetView();
      else if (k === " " && slider) s.togglePlay();
      else done = false;
      if (done) e.preventDefault();
    });
    for (const type of ["keyup", "keypress"]) this.el.addEventListener(type, (e) => e.stopPropagation());
  }

  lower() { return this.s.model.get("y_origin") === "lower"; }
  inPlot(e) {
    const { w, h } = this.s.box();
    return e.offsetX >= M.left && e.offsetX < M.left + w && e.offsetY >= M.top && e.offsetY < M.top + h;
  }
  toData(px, py) {
    const v = this.s.view, { w, h } = this.s.box();
    const x = v.x0 + (px - M.left) / w * (v.x1 - v.x0);
    const f = (py - M.top) / h;
    const y = this.lower() ? v.y1 - f * (v.y1 - v.y0) : v.y0 + f * (v.y1 - v.y0);
    return { x, y };
  }
  sx(x) { const v = this.s.view; return M.left + (x - v.x0) / (v.x1 - v.x0) * this.s.box().w; }
  sy(y) {
    const v = this.s.view, h = this.s.box().h;
    return M.top + (this.lower() ? (v.y1 - y) : (y - v.y0)) / (v.y1 - v.y0) * h;
  }
  pan(dx, dy, v = this.s.view) { // move the view by (dx, dy) screen pixels from view v
    const s = this.s, { w, h } = s.box();
    const kx = (v.x1 - v.x0) / w, ky = (v.y1 - v.y0) / h * (this.lower() ? -1 : 1);
    s.view = { x0: v.x0 + dx * kx, x1: v.x1 + dx * kx, y0: v.y0 + dy * ky, y1: v.y1 + dy * ky };
    s.viewChanged();
  }
  zoom(factor, px, py) {
    const s = this.s, v = s.view, p = this.toData(px, py);
    s.view = { x0: p.x + (v.x0 - p.x) * factor, x1: p.x + (v.x1 - p.x) * factor,
               y0: p.y + (v.y0 - p.y) * factor, y1: p.y + (v.y1 - p.y) * factor };
    s.viewChanged();
  }

  // -- drawing ------------------------------------------------------------------------------
  draw(msg) {
    const s = this.s;
    if (!s.view) s.resetView(false);
    const { w, h } = s.box(), dpr = window.devicePixelRatio || 1;
    const cw = w + M.left + M.right, ch = h + M.top + M.bottom;
    const c = this.canvas;
    if (c.width !== Math.round(cw * dpr) || c.height !== Math.round(ch * dpr)) {
      c.width = Math.round(cw * dpr); c.height = Math.round(ch * dpr);
      c.style.width = `${cw}px`; c.style.height = `${ch}px`;
      this.el.style.width = `${cw}px`; // the text rows below never widen the widget
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cw, ch);
    g.save();
    g.beginPath(); g.rect(M.left, M.top, w, h); g.clip();
    g.imageSmoothingEnabled = false;
    for (const l of [s.base, ...s.layers]) {
      if (!l) continue;
      const e = l.extent, x0 = this.sx(e.x0), x1 = this.sx(e.x1);
      const ya = this.sy(e.y0), yb = this.sy(e.y1);
      g.drawImage(l.canvas, x0, Math.min(ya, yb), x1 - x0, Math.abs(yb - ya));
    }
    g.restore();
    this.axes(g, w, h);
    this.el.dataset.plot = `${M.left},${M.top},${w},${h}`;
    const last = s.last;
    if (last) {
      Object.assign(this.el.dataset, { seq: last.seq, gen: last.gen, label: last.label || "",
                                       index: last.index ?? "", painted: s.counts.painted,
                                       mode: last.mode || "replace", final: last.final === false ? "0" : "1" });
      if (this.info.textContent !== (last.info || "")) this.info.textContent = last.info || "";
    }
    if (msg) this.el.dispatchEvent(new CustomEvent("tse-paint", { detail: msg, bubbles: true }));
  }

  axes(g, w, h) {
    const s = this.s, v = s.view;
    g.strokeStyle = "#444"; g.fillStyle = "#222"; g.lineWidth = 1;
    g.strokeRect(M.left - 0.5, M.top - 0.5, w + 1, h + 1);
    g.font = "11px sans-serif";
    const ax = s.model.get("x_axis") || {}, ay = s.model.get("y_axis") || {};
    g.textAlign = "center"; g.textBaseline = "top";
    for (const [pos, text] of this.ticks(ax, v.x0, v.x1, Math.max(2, w / 90))) {
      const px = this.sx(pos);
      g.beginPath(); g.moveTo(px, M.top + h); g.lineTo(px, M.top + h + 4); g.stroke();
      g.fillText(text, px, M.top + h + 6);
    }
    g.textAlign = "right"; g.textBaseline = "middle";
    for (const [pos, text] of this.ticks(ay, v.y0, v.y1, Math.max(2, h / 60))) {
      const py = this.sy(pos);
      g.beginPath(); g.moveTo(M.left - 4, py); g.lineTo(M.left, py); g.stroke();
      g.fillText(text, M.left - 6, py);
    }
    g.textAlign = "center"; g.textBaseline = "bottom";
    g.fillText(this.axisName(ax), M.left + w / 2, M.top + h + M.bottom);
    g.save(); g.translate(12, M.top + h / 2); g.rotate(-Math.PI / 2);
    g.textBaseline = "middle"; g.fillText(this.axisName(ay), 0, 0); g.restore();
    g.textAlign = "left"; g.textBaseline = "middle"; g.font = "12px sans-serif";
    const title = (s.last && s.last.label) || s.model.get("title") || "";
    g.fillText(title, M.left, M.top / 2);
  }
  axisName(a) { return a.units ? `${a.dim} (${a.units})` : (a.dim || ""); }
  // [index position, label] pairs for the visible index range lo..hi (edges)
  ticks(a, lo, hi, n) {
    const out = [], size = a.size || 1, first = Math.max(-0.5, lo), last = Math.min(size - 0.5, hi);
    if (!(last > first)) return out;
    if (a.labels) { // not uniform: integer index ticks labelled with the coordinate values
      const step = Math.max(1, Math.round(niceStep(last - first, n)));
      for (let i = Math.ceil(first / step) * step; i <= last; i += step) if (i >= 0 && i < size) out.push([i, String(a.labels[i])]);
      return out;
    }
    const c0 = a.c0 ?? 0, dc = a.dc ?? 1;
    const ca = c0 + first * dc, cb = c0 + last * dc, cl = Math.min(ca, cb), ch = Math.max(ca, cb);
    const step = niceStep(ch - cl, n);
    for (let t = Math.ceil(cl / step) * step; t <= ch + step * 1e-9; t += step) {
      out.push([(t - c0) / dc, fmt(Math.abs(t) < step * 1e-9 ? 0 : t)]);
    }
    return out;
  }

  // -- hover, click, slider --------------------------------------------------------------------
  pick(e) {
    const s = this.s, { x, y } = this.toData(e.offsetX, e.offsetY);
    const ix = Math.round(x), iy = Math.round(y);
    for (const l of [...s.layers].reverse().concat(s.base ? [s.base] : [])) {
      const ex = l.extent;
      if (x < ex.x0 || x >= ex.x1 || y < ex.y0 || y >= ex.y1) continue;
      const col = Math.min(l.w - 1, Math.floor((x - ex.x0) / (ex.x1 - ex.x0) * l.w));
      const row = Math.min(l.h - 1, Math.floor((y - ex.y0) / (ex.y1 - ex.y0) * l.h));
      const k = l.idx[row * l.w + col];
      const value = k === 0 ? NaN : l.clim[0] + (k - 1) * (l.clim[1] - l.clim[0]) / 254;
      return { ix, iy, x, y, index: k, value };
    }
    return { ix, iy, x, y, index: null, value: null };
  }
  label(a, i) {
    if (a.labels) return i >= 0 && i < a.labels.length ? String(a.labels[i]) : `${i}`;
    return `${fmt((a.c0 ?? 0) + i * (a.dc ?? 1))}${a.units ? " " + a.units : ""}`;
  }
  hover(e) {
    if (!this.inPlot(e)) { this.readout.textContent = ""; return; }
    const s = this.s, p = this.pick(e), ax = s.model.get("x_axis") || {}, ay = s.model.get("y_axis") || {};
    const val = p.index == null ? "" : p.index === 0 ? " · NaN" : ` · value ≈ ${fmt(p.value)}`;
    this.readout.textContent = `${ax.dim || "x"}=${this.label(ax, p.ix)} [${p.ix}] · ` +
      `${ay.dim || "y"}=${this.label(ay, p.iy)} [${p.iy}]${val}`;
    this.hovered = p;
    if (s.model.get("hover_exact")) {
      clearTimeout(this.hoverTimer);
      this.hoverTimer = setTimeout(() => s.send({ type: "hover", ix: p.ix, iy: p.iy }), 150);
    }
  }
  showExact(msg) {
    if (this.hovered && this.hovered.ix === msg.ix && this.hovered.iy === msg.iy) {
      this.readout.textContent = this.readout.textContent.replace(/ · (value ≈ .*|NaN)$/, "") + ` · ${msg.text}`;
    }
  }
  click(e) {
    if (!this.inPlot(e)) return;
    const p = this.pick(e);
    this.s.send({ type: "pixel", ix: p.ix, iy: p.iy, x: p.x, y: p.y });
  }
  buildSlider() {
    const s = this.s, cfg = s.model.get("slider") || {};
    this.sliderRow.replaceChildren();
    this.range = null;
    if (!cfg.size) return;
    this.play = make("button", "tse-canvas-play");
    this.play.addEventListener("click", () => s.togglePlay());
    this.range = make("input", "tse-canvas-range");
    Object.assign(this.range, { type: "range", min: 0, max: cfg.size - 1, step: 1, value: s.index });
    this.range.addEventListener("input", () => s.setIndex(Number(this.range.value)));
    this.sliderLabel = make("span", "tse-canvas-slider-label");
    this.sliderRow.append(this.play, this.range, this.sliderLabel);
    this.showIndex();
  }
  showIndex() {
    if (!this.range) return;
    const s = this.s, cfg = s.model.get("slider") || {};
    this.range.value = s.index;
    this.play.textContent = s.playing ? "❚❚" : "▶";
    this.sliderLabel.textContent = `${cfg.dim || ""} = ${this.label(cfg, s.index)} [${s.index}]`;
  }
}

// anywidget hands initialize() and each render() a proxy of its own: key the state on an id
const states = new Map();
function stateOf(model) {
  const uid = model.get("_tse_uid");
  let s = states.get(uid);
  if (!s) { s = new State(model); states.set(uid, s); }
  return s;
}

export default {
  initialize({ model }) {
    stateOf(model);
    return () => { states.delete(model.get("_tse_uid")); };
  },
  render({ model, el }) {
    const s = stateOf(model), v = new View(s, el);
    s.views.add(v);
    (window.__tse_canvases ??= new Set()).add(s);
    return () => { s.views.delete(v); };
  },
};
