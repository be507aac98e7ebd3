// tsexplore.ui.theme.ThemeProbe: an empty element that tells the kernel the page's colours
// where it sits (theme.js), now and after every theme change.
export default {
  render({ model, el }) {
    el.classList.add("tse-theme-root");
    Object.assign(el.style, { width: "0", height: "0", overflow: "hidden", margin: "0", padding: "0" });
    let sent = "";
    const check = () => {
      if (!el.isConnected) return;
      const t = readTheme(el), text = JSON.stringify(t);
      if (text !== sent) { sent = text; el.dataset.theme = t.dark ? "dark" : "light"; model.send({ type: "theme", ...t }); }
    };
    requestAnimationFrame(check);
    const unwatch = watchTheme(check);
    model.on("msg:custom", (m) => { if (m.type === "theme?") { sent = ""; check(); } });
    return () => unwatch();
  },
};
