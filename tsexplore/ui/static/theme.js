// tsexplore theme: the page's colours, where an element sits, and a watch on theme changes.
// Loaded before canvas.js (the image canvas) and before theme_probe.js (tsexplore.ui.theme's
// ThemeProbe, for bokeh plots without a canvas beside them); nothing fetched.

// "rgb(r, g, b)" / "rgba(r, g, b, a)" -> [r, g, b, a (0..255)]
function parseColour(text) {
  const m = /rgba?\(([^)]+)\)/.exec(text || "");
  if (!m) return null;
  const p = m[1].split(/[\s,/]+/).filter((x) => x).map(Number);
  return [p[0], p[1], p[2], p.length > 3 ? Math.round(p[3] * 255) : 255];
}

function u32([r, g, b, a]) { return ((a ?? 255) << 24 | b << 16 | g << 8 | r) >>> 0; }
function css([r, g, b, a]) { return `rgba(${r}, ${g}, ${b}, ${(a ?? 255) / 255})`; }

// The page's colours where `el` sits: canvas.css maps them to --tse-* (JupyterLab, VS Code, or
// prefers-color-scheme); a probe element resolves the variables to rgb() values.
const THEME_PARTS = { fg: "color", bg: "background-color", fg2: "border-top-color",
                      border: "border-bottom-color", bg2: "outline-color" };
function readTheme(el) {
  let probe = el.querySelector(":scope > .tse-theme-probe");
  if (!probe) { probe = document.createElement("span"); probe.className = "tse-theme-probe"; el.append(probe); }
  const st = getComputedStyle(probe), out = {};
  for (const [k, prop] of Object.entries(THEME_PARTS)) out[k] = parseColour(st.getPropertyValue(prop)) || [128, 128, 128, 255];
  // the background is what the page paints behind the widget: the nearest ancestor's own
  for (let node = el.parentElement; node; node = node.parentElement) {
    const c = parseColour(getComputedStyle(node).backgroundColor);
    if (c && c[3] > 0) { out.bg = c; break; }
  }
  if (out.bg[3] < 255) { // a see-through background: over white or black, as the page is
    const under = matchMedia("(prefers-color-scheme: dark)").matches ? 0 : 255, a = out.bg[3] / 255;
    out.bg = [0, 1, 2].map((k) => Math.round(out.bg[k] * a + under * (1 - a))).concat([255]);
  }
  const lum = (c) => (0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]) / 255;
  out.dark = lum(out.bg) < 0.5;
  return out;
}

// Calls back when the page's theme may have changed: JupyterLab swaps a stylesheet and sets
// data-jp-theme-* on <body>, VS Code a class, the OS its colour scheme.
const themeWatchers = new Set();
let themeObserved = false;
function watchTheme(fn) {
  themeWatchers.add(fn);
  if (!themeObserved) {
    themeObserved = true;
    const fire = () => { for (const f of themeWatchers) f(); };
    const soon = () => { requestAnimationFrame(fire); setTimeout(fire, 300); setTimeout(fire, 1200); };
    const obs = new MutationObserver(soon);
    for (const node of [document.documentElement, document.body]) {
      if (node) obs.observe(node, { attributes: true, attributeFilter: ["class", "style", "data-jp-theme-name", "data-jp-theme-light", "theme"] });
    }
    matchMedia("(prefers-color-scheme: dark)").addEventListener("change", soon);
  }
  return () => themeWatchers.delete(fn);
}
