// tsexplore image canvas: the browser side of tsexplore.ui.canvas.ImageCanvas (anywidget ESM,
// no build step, nothing fetched). Frames arrive as binary uint8 colour indices (0 = NaN) with
// the region of the array they cover; the 256-colour table is applied here, so a colormap or
// display-range change repaints without asking the kernel. Pan and zoom move the current image
// at once and ask the kernel for the new region. One state per model (frames, view, colours);
// every rendered view of the model draws it.
//
// The plot area is painted pixel by pixel (nearest sample of each screen pixel's centre, in
// float64 like tsexplore.ui._render), so the kernel renders exactly these pixels for
// ex.snapshot() and movies. Colours of text, lines and background come from the page's theme
// (JupyterLab's --jp-* variables, VS Code's --vscode-*, else prefers-color-scheme: canvas.css)
// and follow a theme change live; the kernel is told the theme (its bokeh plots match it).

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

// A channel's table: black (index 1) to its colour (index 255), index 0 (NaN) black
// (tsexplore.ui._frames.channel_ramp is the same arithmetic).
function ramp(hex) {
  const c = [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16));
  const out = new Uint32Array(256);
  for (let i = 1; i < 256; i++) {
    const [r, g, b] = c.map((v) => Math.floor(v * (i - 1) / 254 + 0.5));
    out[i] = (255 << 24 | b << 16 | g << 8 | r) >>> 0;
  }
  out[0] = 0xff000000;
  return out;
}

// A label id's colour, opaque RGBA as a u32 (tsexplore.ui._render.label_rgba is the same
// arithmetic): a 32-bit integer hash of the id, so an id keeps its colour in every frame.
function labelColour(id) {
  let h = id >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b) >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  const r = 48 + (((h & 255) * 207) >> 8), g = 48 + ((((h >>> 8) & 255) * 207) >> 8);
  const b = 48 + ((((h >>> 16) & 255) * 207) >> 8);
  return (255 << 24 | b << 16 | g << 8 | r) >>> 0;
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

// [value, label] ticks of a value range (the colorbar's), ~n of them
function valueTicks(lo, hi, n) {
  const out = [];
  if (!(hi > lo)) return out;
  const step = niceStep(hi - lo, n);
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    out.push([t, fmt(Math.abs(t) < step * 1e-9 ? 0 : Number(t.toPrecision(12)))]);
  }
  return out;
}

// The screen pixels' sample positions along one axis: pixel k of n spans [a, b] evenly;
// its centre (tsexplore.ui._render.centres is the same arithmetic)
function centres(a, b, n, reverse) {
  const out = new Float64Array(n);
  for (let k = 0; k < n; k++) out[k] = reverse ? b - (k + 0.5) / n * (b - a) : a + (k + 0.5) / n * (b - a);
  return out;
}

// The source column (row) of each sample position in a layer of n pixels over [e0, e1),
// -1 outside (tsexplore.ui._render.lookup is the same arithmetic)
function lookup(pos, e0, e1, n, out) {
  for (let k = 0; k < pos.length; k++) {
    const p = pos[k];
    out[k] = p < e0 || p >= e1 ? -1 : Math.min(n - 1, Math.floor((p - e0) / (e1 - e0) * n));
  }
  return out;
}

class State {
  constructor(model) {
    this.model = model;
    this.views = new Set();
    this.base = null; // a kept overview layer, drawn under the others
    this.layers = [];
    this.labels = null; // the label layer: ids over an extent, drawn over the image
    this.gen = this.baseGen = -1;
    this.view = null; // {x0, x1, y0, y1}: edges in index coordinates
    this.pal = palettes(model);
    this.pendingAck = this.ackTimer = this.vpTimer = this.playTimer = null;
    this.vpSent = this.lastStep = 0;
    this.counts = { received: 0, painted: 0, stale: 0, bytes: 0 };
    this.last = null; // meta of the last painted frame
    this.playing = false;
    this.active = 0; // the channel whose histogram is shown
    this.dragClim = null; // {channel, clim} while a histogram handle is dragged
    this.themeSent = "";
    this.index = (model.get("slider") || {}).value ?? 0;
    model.on("msg:custom", (msg, buffers) => this.onMessage(msg, buffers));
    for (const name of ["cmap", "clim", "y_origin", "channel_clims", "channel_on", "channel_colors"]) {
      model.on(`change:${name}`, () => this.recolour());
    }
    for (const name of ["roi_box", "crosshair", "label_opacity", "colorbar", "value_axis", "margins", "poster"]) {
      model.on(`change:${name}`, () => this.drawAll());
    }
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
  margins() { return this.model.get("margins") || { left: 58, right: 14, top: 24, bottom: 40, colorbar: 84 }; }
  full() {
    const ny = (this.model.get("y_axis") || {}).size || 1, nx = (this.model.get("x_axis") || {}).size || 1;
    return { y0: -0.5, y1: ny - 0.5, x0: -0.5, x1: nx - 0.5 };
  }
  box() { return { w: this.model.get("width"), h: this.model.get("height") }; }
  lower() { return this.model.get("y_origin") === "lower"; }
  fit(e) { // widen e to square pixels on the plot box (tsexplore.ui._frames.fit_view)
    const { w, h } = this.box();
    if (this.model.get("aspect") !== "equal") return { ...e };
    const py = (e.y1 - e.y0) / h, px = (e.x1 - e.x0) / w, per = Math.max(py, px);
    if (Math.abs(py - px) <= 1e-9 * per) return { ...e }; // square already: kept exactly
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
  // the colour bars shown: one per visible channel of a composite, one without channels,
  // none for RGB(A) or when the kernel turned them off (tsexplore.ui._render.colorbars)
  bars() {
    if (!this.model.get("colorbar") || this.model.get("rgb")) return [];
    const n = this.nch();
    if (n < 2) return [0];
    const on = this.model.get("channel_on") || [];
    return [...Array(n).keys()].filter((k) => on[k] !== false);
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
  sendTheme(theme) { // the kernel's bokeh plots follow the page's colours
    const text = JSON.stringify(theme);
    if (text === this.themeSent) return;
    this.themeSent = text;
    this.send({ type: "theme", ...theme });
  }
  onMessage(msg, buffers) {
    const t = performance.now();
    if (msg.type === "frame") {
      this.counts.received++;
      // the page's stages of a frame, only when a benchmark asks (window.__tse_profile = [])
      const prof = window.__tse_profile;
      if (prof && prof.length < 10000) {
        const ws = window.__tse_ws;
        prof.push(this.prof = { seq: msg.seq, index: msg.index, key: window.__tse_t0 ?? null,
                                ws: ws && ws.lastBinary != null ? ws.lastBinary : null, recv: t });
      } else this.prof = null;
      const bytes = bytesOf(buffers && buffers[0]);
      this.counts.bytes += bytes.byteLength;
      this.flushAck(); // a held ack belongs to an older frame
      this.pendingAck = { seq: msg.seq, t };
      if (msg.ack !== "lazy") this.flushAck();
      else this.ackTimer = setTimeout(() => this.flushAck(), this.model.get("lazy_ack_ms"));
      // with the tiles that travelled along (``more``), added in their order
      let done = Promise.resolve();
      [[msg, bytes], ...(msg.more || []).map((part, k) => [{ ...msg, hist: null, ...part }, bytesOf(buffers[k + 1])])]
        .forEach(([m, b], k) => {
          if (k) this.counts.bytes += b.byteLength;
          const hist = m.hist ? { ...m.hist, bytes: bytesOf(buffers[m.hist.buffer]).slice() } : null;
          if (hist) this.counts.bytes += hist.bytes.byteLength;
          done = done.then(() => this.decode(m, b)).then((idx) => this.addFrame(m, idx, hist));
        });
    } else if (msg.type === "labels") {
      this.addLabels(msg, buffers || []);
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
      this.layers = []; this.base = null; this.labels = null; this.drawAll();
    } else if (msg.type === "theme?") {
      this.themeSent = "";
      this.views.forEach((v) => v.themeChanged(true));
    }
  }
  async decode(msg, bytes) {
    const [h0, w] = msg.shape, h = h0 * (msg.channels || 1); // channels travel stacked
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
  addFrame(msg, idx, hist) {
    const mode = msg.mode || "replace";
    if ((mode === "base" && msg.gen < this.baseGen) || (mode !== "base" && msg.gen < this.gen)) {
      this.counts.stale++;
      return;
    }
    const [h, w] = msg.shape, [[y0, y1], [x0, x1]] = msg.extent;
    // a frame replacing one of its size reuses its colours' buffer (no 4 bytes/pixel of garbage a frame)
    const old = mode === "replace" && this.layers.length === 1 ? this.layers[0] : null;
    const same = old && old.w === w && old.h === h;
    const rgba = same ? old.rgba : new Uint32Array(Math.max(1, w * h));
    const layer = { gen: msg.gen, seq: msg.seq, w, h, idx, clim: msg.clim, clims: msg.clims || [msg.clim],
                    nch: msg.channels || 1, rgba, extent: { y0, y1, x0, x1 }, at: msg.at ?? null };
    const prof = this.prof && this.prof.seq === msg.seq ? this.prof : null;
    if (prof && prof.decoded == null) prof.decoded = performance.now();
    this.colour(layer);
    if (prof) prof.coloured = performance.now();
    if (mode === "base") { // a newer picture's overview: the older picture goes
      this.base = layer; this.baseGen = msg.gen;
      if (msg.gen > this.gen) { this.layers = []; this.gen = msg.gen; }
    }
    else if (mode === "tile" && msg.gen === this.gen) {
      this.layers.push(layer);
      if (this.layers.length > MAX_TILES) this.layers.shift();
    } else { this.layers = [layer]; this.gen = msg.gen; }
    this.last = msg;
    if (hist) this.hist = hist;
    this.counts.painted++;
    this.drawAll(msg);
    if (prof) {
      prof.drawn = performance.now();
      requestAnimationFrame(() => { prof.raf = performance.now(); });
    }
    if (this.playing && (msg.index == null || msg.index === this.index)) this.stepLater();
  }
  // a label layer: compact indices into a table of uint32 ids (0 = no label), over an extent
  addLabels(msg, buffers) {
    if (msg.clear) { this.labels = null; this.drawAll(); return; }
    if (this.labels && msg.gen < this.labels.gen) return;
    const raw = bytesOf(buffers[0]).slice(), table = new Uint32Array(bytesOf(buffers[1]).slice().buffer);
    const Kind = { uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array }[msg.dtype] || Uint8Array;
    const [h, w] = msg.shape, [[y0, y1], [x0, x1]] = msg.extent;
    const colours = new Uint32Array(table.length);
    for (let k = 0; k < table.length; k++) colours[k] = table[k] === 0 ? 0 : labelColour(table[k]);
    this.labels = { gen: msg.gen, at: msg.at ?? null, w, h, idx: new Kind(raw.buffer), table, colours,
                    extent: { y0, y1, x0, x1 } };
    this.counts.labels = (this.counts.labels || 0) + 1;
    this.drawAll();
  }
  // the label layer goes with the image at the same slider position only
  labelsShown() {
    const L = this.labels, m = this.last;
    if (!L) return null;
    return L.at == null || !m || m.at == null || L.at === m.at ? L : null;
  }

  // -- colour -------------------------------------------------------------------------------
  // the display range of channel k: dragged now, else set, else the frame's own
  display(k) {
    if (this.dragClim && this.dragClim.channel === k) return this.dragClim.clim;
    if (this.nch() > 1) return (this.model.get("channel_clims") || [])[k] || null;
    return this.model.get("clim");
  }
  nch() { return (this.last && this.last.channels) || 1; }
  inUse(k) {
    const d = this.display(k);
    if (d) return d;
    const m = this.last;
    return m ? (m.clims || [m.clim])[k] || m.clim : null;
  }
  palette() { return this.pal.get(this.model.get("cmap")) || this.pal.values().next().value; }
  // each layer keeps its colours in data order (row 0 = lowest y index); drawing places them
  colour(layer) {
    if (layer.nch > 1) { this.composite(layer); return; }
    const pal = this.palette();
    if (!pal) return;
    const lut = composeLut(pal, layer.clim, this.display(0));
    const out = layer.rgba, idx = layer.idx, n = layer.w * layer.h;
    for (let i = 0; i < n; i++) out[i] = lut[idx[i]];
  }
  // channels: an additive blend of each channel's colour ramp (or RGB(A) as it is)
  // (tsexplore.ui._frames.composite_rgba is the same arithmetic)
  composite(layer) {
    const n = layer.nch, plane = layer.w * layer.h, idx = layer.idx;
    const on = this.model.get("channel_on") || [], colours = this.model.get("channel_colors") || [];
    const rgba = new Uint8ClampedArray(layer.rgba.buffer, 0, plane * 4);
    const acc = new Uint16Array(plane * 3);
    if (this.model.get("rgb")) {
      for (let k = 0; k < Math.min(n, 3); k++) {
        if (on[k] === false) continue;
        for (let i = 0; i < plane; i++) acc[i * 3 + k] = idx[k * plane + i];
      }
    } else {
      for (let k = 0; k < n; k++) {
        if (on[k] === false) continue;
        const lut = composeLut(ramp(colours[k] || "#ffffff"), layer.clims[k], this.display(k));
        for (let i = 0; i < plane; i++) {
          const c = lut[idx[k * plane + i]];
          acc[i * 3] += c & 255; acc[i * 3 + 1] += (c >>> 8) & 255; acc[i * 3 + 2] += (c >>> 16) & 255;
        }
      }
    }
    const alpha = this.model.get("rgb") && n > 3 && on[3] !== false ? 3 * plane : -1;
    for (let i = 0; i < plane; i++) {
      const o = i * 4;
      rgba[o] = acc[i * 3]; rgba[o + 1] = acc[i * 3 + 1]; rgba[o + 2] = acc[i * 3 + 2];
      rgba[o + 3] = alpha >= 0 ? idx[alpha + i] : 255;
    }
  }
  recolour() {
    for (const l of [this.base, ...this.layers]) if (l) this.colour(l);
    this.drawAll();
  }
  // a colour range picked in the browser (a handle dragged, a field typed): shown now, the
  // kernel told (it quantises again when the indices cannot show it)
  pickClim(k, clim, final = true) {
    if (!(clim[1] > clim[0])) return;
    this.dragClim = final ? null : { channel: k, clim };
    if (final) {
      if (this.nch() > 1) {
        const all = [...(this.model.get("channel_clims") || [])];
        while (all.length < this.nch()) all.push(null);
        all[k] = clim; this.model.set("channel_clims", all);
      } else this.model.set("clim", clim);
      this.send({ type: "clim", channel: k, clim });
    }
    this.recolour();
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
    this.histRow = make("div", "tse-canvas-hist");
    this.hist = make("canvas", "tse-canvas-hist-plot"); this.histRow.append(this.hist);
    this.rangeRow = make("div", "tse-canvas-ranges");
    this.lo = make("input", "tse-canvas-lo"); this.hi = make("input", "tse-canvas-hi");
    for (const [f, name] of [[this.lo, "min"], [this.hi, "max"]]) {
      Object.assign(f, { type: "number", step: "any", title: `colour range ${name}` });
      const label = make("label", "tse-canvas-range-label"); label.append(`${name} `, f);
      this.rangeRow.append(label);
      f.addEventListener("change", () => this.typed());
    }
    this.chips = make("span", "tse-canvas-chips"); this.rangeRow.append(this.chips);
    el.append(this.canvas, this.bar, this.sliderRow, this.histRow, this.rangeRow, this.info);
    this.theme = readTheme(el);
    this.unwatch = watchTheme(() => this.themeChanged());
    this.buildSlider();
    this.listen();
    this.listenHist();
    this.draw();
    // once in the page (its colours are known then): draw again, tell the kernel the theme;
    // a view made after frames came shows them
    requestAnimationFrame(() => { this.themeChanged(true); if (state.last) this.draw(state.last); });
  }
  themeChanged(force = false) {
    if (this.takeTheme(force)) this.draw();
  }
  // read the page's colours where the view is shown (a detached element has none); tell the
  // kernel; whether they changed
  takeTheme(force = false) {
    if (!this.el.isConnected) return false;
    this.themeKnown = true;
    const t = readTheme(this.el), text = JSON.stringify(t);
    if (!force && text === JSON.stringify(this.theme)) return false;
    this.theme = t;
    this.el.dataset.theme = t.dark ? "dark" : "light";
    this.s.sendTheme(t);
    return true;
  }

  listen() {
    const c = this.canvas, s = this.s;
    let drag = null;
    c.addEventListener("pointerdown", (e) => {
      if (!this.inPlot(e)) return;
      drag = { x: e.offsetX, y: e.offsetY, view: { ...s.view }, moved: false, roi: e.shiftKey };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener("pointermove", (e) => {
      this.hover(e);
      if (!drag) return;
      if (drag.roi) { // shift-drag: a region for statistics along the slider
        const a = this.toData(drag.x, drag.y), b = this.toData(e.offsetX, e.offsetY);
        s.roiDraft = { y: [Math.min(a.y, b.y), Math.max(a.y, b.y)], x: [Math.min(a.x, b.x), Math.max(a.x, b.x)] };
        s.drawAll();
        return;
      }
      const dx = e.offsetX - drag.x, dy = e.offsetY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) this.pan(-dx, -dy, drag.view); // the picture follows the pointer
    });
    c.addEventListener("pointerup", (e) => {
      if (drag && drag.roi && s.roiDraft) {
        s.send({ type: "roi", ...s.roiDraft }); s.roiDraft = null;
      } else if (drag && !drag.moved && !drag.roi) this.click(e);
      drag = null;
    });
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
      const { w, h } = s.box(), M = s.margins();
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

  // -- the contrast histogram: two handles set the active channel's colour range ---------------
  histSpan() {
    const h = this.s.hist, k = this.s.active;
    return h && h.ranges ? h.ranges[k] || h.ranges[0] : null;
  }
  listenHist() {
    const c = this.hist, s = this.s;
    let handle = null;
    const value = (e) => { const r = this.histSpan(); return r[0] + e.offsetX / c.clientWidth * (r[1] - r[0]); };
    const picked = (v) => {
      const cur = s.inUse(s.active), other = cur[1 - handle];
      return handle === 0 ? [Math.min(v, other), other] : [other, Math.max(v, other)];
    };
    c.addEventListener("pointerdown", (e) => {
      const r = this.histSpan(), cur = s.inUse(s.active);
      if (!r || !cur) return;
      const v = value(e);
      handle = Math.abs(v - cur[0]) <= Math.abs(v - cur[1]) ? 0 : 1;
      c.setPointerCapture(e.pointerId);
      s.pickClim(s.active, picked(v), false);
    });
    c.addEventListener("pointermove", (e) => { if (handle !== null) s.pickClim(s.active, picked(value(e)), false); });
    c.addEventListener("pointerup", (e) => {
      if (handle === null) return;
      const clim = picked(value(e)); handle = null; s.pickClim(s.active, clim, true);
    });
  }
  typed() {
    const lo = Number(this.lo.value), hi = Number(this.hi.value);
    if (isFinite(lo) && isFinite(hi) && hi > lo) this.s.pickClim(this.s.active, [lo, hi], true);
  }
  drawHist() {
    const s = this.s, { w } = s.box(), H = 56, dpr = window.devicePixelRatio || 1, c = this.hist;
    const hist = s.hist, r = this.histSpan(), k = s.active;
    this.histRow.style.display = hist ? "" : "none";
    this.rangeRow.style.display = hist ? "" : "none";
    this.histRow.style.paddingLeft = this.rangeRow.style.paddingLeft = `${s.margins().left}px`;
    if (!hist || !r) return;
    if (c.width !== Math.round(w * dpr)) { c.width = Math.round(w * dpr); c.style.width = `${w}px`; }
    if (c.height !== Math.round(H * dpr)) { c.height = Math.round(H * dpr); c.style.height = `${H}px`; }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0); g.clearRect(0, 0, w, H);
    g.fillStyle = css(this.theme.bg2); g.fillRect(0, 0, w, H);
    const bins = hist.bytes.subarray(k * 256, (k + 1) * 256), n = bins.length || 1;
    const colour = s.nch() > 1 ? ((s.model.get("channel_colors") || [])[k] || "#888888") : css(this.theme.fg2);
    g.fillStyle = colour; g.globalAlpha = 0.8;
    for (let b = 0; b < n; b++) {
      const bh = bins[b] / 255 * (H - 4);
      g.fillRect(b / n * w, H - bh, Math.max(1, w / n), bh);
    }
    g.globalAlpha = 1;
    const cur = s.inUse(k);
    if (cur) {
      g.strokeStyle = "#d62728"; g.lineWidth = 2;
      for (const v of cur) {
        const x = (v - r[0]) / (r[1] - r[0]) * w;
        g.beginPath(); g.moveTo(x, 0); g.lineTo(x, H); g.stroke();
      }
      for (const [f, v] of [[this.lo, cur[0]], [this.hi, cur[1]]]) {
        if (document.activeElement !== f && f.value !== fmt(v)) f.value = fmt(v);
      }
      Object.assign(this.el.dataset, { climLo: cur[0], climHi: cur[1], histLo: r[0], histHi: r[1] });
    }
  }
  // A new frame's histogram, range fields and channel chips are drawn after its image is
  // painted (the frame after; once however many frames came meanwhile), so they are not on
  // the move's path: the bare canvas has none of them.
  histLater() {
    if (this.histPending) return;
    this.histPending = true;
    requestAnimationFrame(() => setTimeout(() => {
      this.histPending = false;
      const prof = this.s.prof, t0 = prof ? performance.now() : 0;
      this.drawHist(); this.buildChips();
      if (prof) prof.hist = (prof.hist || 0) + performance.now() - t0;
    }, 0));
  }
  buildChips() {
    const s = this.s, m = s.last, n = s.nch();
    const names = s.model.get("channel_names") || [], colours = s.model.get("channel_colors") || [];
    const key = `${n}|${names.join(",")}|${colours.join(",")}|${s.active}|${(s.model.get("channel_on") || []).join(",")}`;
    if (this.chipKey === key) return;
    this.chipKey = key;
    this.chips.replaceChildren();
    if (!m || n < 2) return;
    for (let k = 0; k < n; k++) {
      const chip = make("label", "tse-canvas-chip" + (k === s.active ? " tse-active" : ""));
      const box = make("input", "tse-canvas-chip-on");
      box.type = "checkbox"; box.checked = (s.model.get("channel_on") || [])[k] !== false;
      box.addEventListener("change", () => {
        const on = [...(s.model.get("channel_on") || [])];
        while (on.length < n) on.push(true);
        on[k] = box.checked; s.model.set("channel_on", on); s.model.save_changes();
      });
      const name = make("span", "tse-canvas-chip-name");
      name.textContent = names[k] ?? `${k}`; name.style.borderBottom = `3px solid ${colours[k] || "#fff"}`;
      name.addEventListener("click", (e) => { e.preventDefault(); s.active = k; s.drawAll(); });
      chip.append(box, name); this.chips.append(chip);
    }
  }
  roiRect(g) {
    const s = this.s, r = s.roiDraft || s.model.get("roi_box");
    if (!r || !r.x || !r.y) return;
    const x0 = this.sx(r.x[0]), x1 = this.sx(r.x[1]), ya = this.sy(r.y[0]), yb = this.sy(r.y[1]);
    g.save(); g.strokeStyle = "#ffdd00"; g.lineWidth = 1.5; g.setLineDash([5, 3]);
    g.strokeRect(x0, Math.min(ya, yb), x1 - x0, Math.abs(yb - ya)); g.restore();
  }
  // the crosshair of linked orthogonal planes: a line through the centre of each pixel given
  crossLines(g, w, h) {
    const c = this.s.model.get("crosshair") || {}, M = this.s.margins();
    if (c.x == null && c.y == null) return;
    g.save(); g.strokeStyle = "rgba(255, 221, 0, 0.9)"; g.lineWidth = 1; g.setLineDash([4, 3]);
    if (c.x != null) { const px = this.sx(c.x); g.beginPath(); g.moveTo(px, M.top); g.lineTo(px, M.top + h); g.stroke(); }
    if (c.y != null) { const py = this.sy(c.y); g.beginPath(); g.moveTo(M.left, py); g.lineTo(M.left + w, py); g.stroke(); }
    g.restore();
  }

  lower() { return this.s.lower(); }
  inPlot(e) {
    const { w, h } = this.s.box(), M = this.s.margins();
    return e.offsetX >= M.left && e.offsetX < M.left + w && e.offsetY >= M.top && e.offsetY < M.top + h;
  }
  toData(px, py) {
    const v = this.s.view, { w, h } = this.s.box(), M = this.s.margins();
    const x = v.x0 + (px - M.left) / w * (v.x1 - v.x0);
    const f = (py - M.top) / h;
    const y = this.lower() ? v.y1 - f * (v.y1 - v.y0) : v.y0 + f * (v.y1 - v.y0);
    return { x, y };
  }
  sx(x) { const v = this.s.view; return this.s.margins().left + (x - v.x0) / (v.x1 - v.x0) * this.s.box().w; }
  sy(y) {
    const v = this.s.view, h = this.s.box().h;
    return this.s.margins().top + (this.lower() ? (v.y1 - y) : (y - v.y0)) / (v.y1 - v.y0) * h;
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
  // the canvas's size in CSS pixels (tsexplore.ui._render.canvas_size is the same rule)
  size() {
    const s = this.s, { w, h } = s.box(), M = s.margins();
    return { cw: w + M.left + M.right + s.bars().length * M.colorbar, ch: h + M.top + M.bottom };
  }
  draw(msg) {
    const s = this.s;
    if (!this.themeKnown) this.takeTheme(true);
    if (!s.view) s.resetView(false);
    const { w, h } = s.box(), dpr = window.devicePixelRatio || 1, M = s.margins();
    const { cw, ch } = this.size();
    const c = this.canvas;
    if (c.width !== Math.round(cw * dpr) || c.height !== Math.round(ch * dpr)) {
      c.width = Math.round(cw * dpr); c.height = Math.round(ch * dpr);
      c.style.width = `${cw}px`; c.style.height = `${ch}px`;
      this.el.style.width = `${cw}px`; // the text rows below never widen the widget
    }
    const g = c.getContext("2d");
    g.setTransform(1, 0, 0, 1, 0, 0);
    g.fillStyle = css(this.theme.bg); g.fillRect(0, 0, c.width, c.height);
    const poster = !s.base && !s.layers.length && this.drawPoster(g);
    if (!poster) {
      this.drawPlot(g, w, h, dpr);
      this.drawBars(g, w, h, dpr);
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.save();
      g.beginPath(); g.rect(M.left, M.top, w, h); g.clip();
      this.crossLines(g, w, h);
      this.roiRect(g);
      g.restore();
      this.axes(g, w, h);
    }
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    if (msg) this.histLater(); // a new frame: its image first, its histogram after
    else { this.drawHist(); this.buildChips(); } // a handle dragged, a channel picked: at once
    this.el.dataset.plot = `${M.left},${M.top},${w},${h}`;
    const last = s.last;
    if (last) {
      Object.assign(this.el.dataset, { seq: last.seq, gen: last.gen, label: last.label || "",
                                       index: last.index ?? "", painted: s.counts.painted,
                                       mode: last.mode || "replace", final: last.final === false ? "0" : "1" });
      if (this.info.textContent !== (last.info || "")) this.info.textContent = last.info || "";
    }
    this.el.dataset.labels = s.labelsShown() ? String(s.labels.gen) : "";
    if (msg) this.el.dispatchEvent(new CustomEvent("tse-paint", { detail: msg, bubbles: true }));
  }
  // The picture saved with the notebook (the kernel's last snapshot), shown until frames come:
  // a notebook reopened without a kernel still shows its image.
  drawPoster(g) {
    const png = bytesOf(this.s.model.get("poster"));
    if (!png.byteLength) return false;
    if (this.posterBytes !== png.byteLength) {
      this.posterBytes = png.byteLength; this.posterBmp = null;
      createImageBitmap(new Blob([png], { type: "image/png" })).then((b) => { this.posterBmp = b; this.draw(); });
    }
    if (this.posterBmp) g.drawImage(this.posterBmp, 0, 0, this.posterBmp.width * (window.devicePixelRatio || 1),
                                    this.posterBmp.height * (window.devicePixelRatio || 1));
    return true;
  }
  // The plot area, screen pixel by screen pixel: each takes the layer pixel under its centre
  // (base first, then the frames and tiles in order), then the labels blended over it
  // (tsexplore.ui._render.plot_pixels is the same arithmetic).
  drawPlot(g, w, h, dpr) {
    const s = this.s, M = s.margins(), v = s.view;
    const W = Math.max(1, Math.round(w * dpr)), H = Math.max(1, Math.round(h * dpr));
    if (!this.plot || this.plot.width !== W || this.plot.height !== H) {
      this.plot = new ImageData(W, H);
      this.cols = new Int32Array(W); this.rows = new Int32Array(H);
    }
    const out = new Uint32Array(this.plot.data.buffer);
    out.fill(u32(this.theme.bg));
    const xs = centres(v.x0, v.x1, W, false), ys = centres(v.y0, v.y1, H, this.lower());
    const cols = this.cols, rows = this.rows;
    for (const l of [s.base, ...s.layers]) {
      if (!l || !l.rgba) continue;
      const e = l.extent, src = l.rgba;
      lookup(xs, e.x0, e.x1, l.w, cols); lookup(ys, e.y0, e.y1, l.h, rows);
      let c0 = 0, c1 = W;
      while (c0 < W && cols[c0] < 0) c0++;
      while (c1 > c0 && cols[c1 - 1] < 0) c1--;
      if (c0 >= c1) continue;
      let run = true; // one screen pixel per layer pixel across: rows are copied whole
      for (let k = c0 + 1; k < c1 && run; k++) run = cols[k] === cols[k - 1] + 1;
      for (let r = 0; r < H; r++) {
        const row = rows[r];
        if (row < 0) continue;
        const so = row * l.w, d = r * W;
        if (run) out.set(src.subarray(so + cols[c0], so + cols[c0] + c1 - c0), d + c0);
        else for (let k = c0; k < c1; k++) out[d + k] = src[so + cols[k]];
      }
    }
    const L = s.labelsShown(), a = Math.floor((s.model.get("label_opacity") ?? 0.5) * 255 + 0.5);
    if (L && a > 0) {
      const e = L.extent, bytes = new Uint8Array(this.plot.data.buffer);
      lookup(xs, e.x0, e.x1, L.w, cols); lookup(ys, e.y0, e.y1, L.h, rows);
      for (let r = 0; r < H; r++) {
        const row = rows[r];
        if (row < 0) continue;
        for (let k = 0; k < W; k++) {
          if (cols[k] < 0) continue;
          const t = L.idx[row * L.w + cols[k]], lc = L.colours[t];
          if (!lc) continue;
          const o = (r * W + k) * 4;
          bytes[o] = (bytes[o] * (255 - a) + (lc & 255) * a + 127) / 255 | 0;
          bytes[o + 1] = (bytes[o + 1] * (255 - a) + ((lc >>> 8) & 255) * a + 127) / 255 | 0;
          bytes[o + 2] = (bytes[o + 2] * (255 - a) + ((lc >>> 16) & 255) * a + 127) / 255 | 0;
        }
      }
    }
    g.putImageData(this.plot, Math.round(M.left * dpr), Math.round(M.top * dpr));
  }
  // One colour bar per visible channel right of the plot, over the range in use: row r of the
  // bar (top first) shows colour index 1 + round((1 - (r + 0.5) / rows) * 254)
  // (tsexplore.ui._render.bar_pixels is the same arithmetic)
  drawBars(g, w, h, dpr) {
    const s = this.s, M = s.margins(), bars = s.bars();
    if (!bars.length) return;
    const BW = Math.max(1, Math.round(12 * dpr)), BH = Math.max(1, Math.round(h * dpr));
    const img = new ImageData(BW, BH), out = new Uint32Array(img.data.buffer);
    const colours = s.model.get("channel_colors") || [];
    bars.forEach((k, j) => {
      const table = s.nch() > 1 ? ramp(colours[k] || "#ffffff") : s.palette();
      if (!table) return;
      for (let r = 0; r < BH; r++) {
        const t = 1 - (r + 0.5) / BH, c = table[1 + Math.floor(t * 254 + 0.5)];
        out.fill(c, r * BW, (r + 1) * BW);
      }
      g.putImageData(img, Math.round((M.left + w + 12 + j * M.colorbar) * dpr), Math.round(M.top * dpr));
    });
  }

  axes(g, w, h) {
    const s = this.s, v = s.view, M = s.margins(), th = this.theme;
    g.strokeStyle = css(th.fg2); g.fillStyle = css(th.fg); g.lineWidth = 1;
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
    this.barAxes(g, w, h);
    g.textAlign = "left"; g.textBaseline = "middle"; g.font = "12px sans-serif";
    const title = (s.last && s.last.label) || s.model.get("title") || "";
    g.fillText(title, M.left, M.top / 2);
  }
  // each colour bar's frame, ticks in the variable's units, and its name
  barAxes(g, w, h) {
    const s = this.s, M = s.margins(), va = s.model.get("value_axis") || {};
    const names = s.model.get("channel_names") || [];
    s.bars().forEach((k, j) => {
      const x = M.left + w + 12 + j * M.colorbar, rng = s.inUse(k);
      g.strokeRect(x - 0.5, M.top - 0.5, 13, h + 1);
      g.textAlign = "left"; g.textBaseline = "middle"; g.font = "11px sans-serif";
      if (rng && rng[1] > rng[0]) {
        for (const [val, text] of valueTicks(rng[0], rng[1], Math.max(2, h / 50))) {
          const py = M.top + (1 - (val - rng[0]) / (rng[1] - rng[0])) * h;
          g.beginPath(); g.moveTo(x + 12, py); g.lineTo(x + 16, py); g.stroke();
          g.fillText(text, x + 18, py);
        }
      }
      const name = s.nch() > 1 ? (names[k] ?? `${k}`) : (va.label || "");
      const label = va.units ? (name ? `${name} (${va.units})` : va.units) : name;
      g.save(); g.translate(x + M.colorbar - 8, M.top + h / 2); g.rotate(-Math.PI / 2);
      g.textAlign = "center"; g.textBaseline = "middle"; g.fillText(label, 0, 0); g.restore();
    });
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
    let label = null;
    const L = s.labelsShown();
    if (L && x >= L.extent.x0 && x < L.extent.x1 && y >= L.extent.y0 && y < L.extent.y1) {
      const col = Math.min(L.w - 1, Math.floor((x - L.extent.x0) / (L.extent.x1 - L.extent.x0) * L.w));
      const row = Math.min(L.h - 1, Math.floor((y - L.extent.y0) / (L.extent.y1 - L.extent.y0) * L.h));
      label = L.table[L.idx[row * L.w + col]];
    }
    for (const l of [...s.layers].reverse().concat(s.base ? [s.base] : [])) {
      const ex = l.extent;
      if (x < ex.x0 || x >= ex.x1 || y < ex.y0 || y >= ex.y1) continue;
      const col = Math.min(l.w - 1, Math.floor((x - ex.x0) / (ex.x1 - ex.x0) * l.w));
      const row = Math.min(l.h - 1, Math.floor((y - ex.y0) / (ex.y1 - ex.y0) * l.h));
      const at = (c) => l.idx[c * l.w * l.h + row * l.w + col];
      const val = (c) => { const k = at(c), cl = l.clims[c]; return k === 0 ? NaN : cl[0] + (k - 1) * (cl[1] - cl[0]) / 254; };
      const k = at(0), value = val(0);
      const values = l.nch > 1 ? [...Array(l.nch).keys()].map((c) => (s.model.get("rgb") ? at(c) : val(c))) : null;
      return { ix, iy, x, y, index: k, value, values, label };
    }
    return { ix, iy, x, y, index: null, value: null, label };
  }
  label(a, i) {
    if (a.labels) return i >= 0 && i < a.labels.length ? String(a.labels[i]) : `${i}`;
    return `${fmt((a.c0 ?? 0) + i * (a.dc ?? 1))}${a.units ? " " + a.units : ""}`;
  }
  hover(e) {
    if (!this.inPlot(e)) { this.readout.textContent = ""; return; }
    const s = this.s, p = this.pick(e), ax = s.model.get("x_axis") || {}, ay = s.model.get("y_axis") || {};
    const val = p.values ? ` · values ≈ ${p.values.map(fmt).join(", ")}`
      : p.index == null ? "" : p.index === 0 ? " · NaN" : ` · value ≈ ${fmt(p.value)}`;
    const lab = p.label == null ? "" : p.label === 0 ? " · no label" : ` · label ${p.label}`;
    this.readout.textContent = `${ax.dim || "x"}=${this.label(ax, p.ix)} [${p.ix}] · ` +
      `${ay.dim || "y"}=${this.label(ay, p.iy)} [${p.iy}]${lab}${val}`;
    this.el.dataset.hoverLabel = p.label == null ? "" : String(p.label);
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
    this.sliderRow.style.paddingLeft = `${s.margins().left}px`;
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
    return () => { s.views.delete(v); v.unwatch(); };
  },
};
