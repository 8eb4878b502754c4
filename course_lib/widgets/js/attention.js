// The attention explorer (course_lib/widgets/attention.py, AttentionExplorer.widget): the
// weights of every kind, layer and head are in data; choosing one and re-normalising it at a
// temperature (apply_temperature) happens in the page.

function applyTemperature(m, t) {
  return m.map((row) => {
    const logw = row.map((w) => (w > 0 ? Math.log(w) / t : -Infinity));
    let top = Math.max(...logw);
    if (!isFinite(top)) top = 0;
    const e = logw.map((x) => Math.exp(x - top));
    const z = e.reduce((a, b) => a + b, 0);
    return e.map((x) => (z > 0 ? x / z : 0));
  });
}

function render({ model, el }) {
  const data = model.get("data");
  let kind = data.kind;
  const box = root(el, "course-w-attention");
  const menu = h("select", { class: "course-w-kind" }, data.kinds.map((k) => h("option", { value: k }, k)));
  const layer = h("input", { type: "range", min: "0", step: "1", class: "course-w-layer" });
  const head = h("input", { type: "range", min: "0", step: "1", class: "course-w-head" });
  const temp = h("input", { type: "range", min: "-1", max: "1", step: "0.05", value: "0", class: "course-w-temp" });
  const values = h("span", { class: "course-w-values", style: "font-size:12px;margin-left:8px" });
  const out = h("div", { class: "course-w-out" });

  function limits() {
    const layers = data.weights[kind];
    layer.max = String(layers.length - 1);
    head.max = String(layers[0].length - 1);
    if (Number(layer.value) > layers.length - 1) layer.value = "0";
    if (Number(head.value) > layers[0].length - 1) head.value = "0";
  }

  function show() {
    const l = Number(layer.value), hd = Number(head.value), t = 10 ** Number(temp.value);
    const m = applyTemperature(data.weights[kind][l][hd], t);
    const [keys, queries] = data.labels[kind];
    values.textContent = `layer ${l}, head ${hd}, T = ${fmtG(t, 2)}`;
    const top = h("tr", {}, [h("th"), ...keys.map((k) => h("th", { style: "writing-mode:vertical-rl" }, k))]);
    const rows = m.map((row, q) =>
      h("tr", {}, [
        h("th", { style: "text-align:right" }, queries[q]),
        ...row.map((w, k) =>
          h("td", {
            "data-q": q, "data-k": k, "data-v": w.toFixed(4), title: `${queries[q]} -> ${keys[k]}: ${w.toFixed(3)}`,
            style: `background:rgba(40,90,200,${Math.min(1, w).toFixed(3)})`,
          })
        ),
      ])
    );
    out.replaceChildren(
      h("div", { style: "font-size:12px" }, `${kind}, layer ${l}, head ${hd}, T = ${fmtG(t, 2)} (rows: queries, columns: keys)`),
      h("table", { class: "course-w-grid course-w-map" }, [top, ...rows])
    );
  }

  menu.value = kind;
  menu.addEventListener("change", () => { kind = menu.value; limits(); show(); });
  for (const s of [layer, head, temp]) s.addEventListener("input", show);
  box.append(
    h("div", {}, [h("label", {}, ["attention ", menu])]),
    h("div", {}, [h("label", {}, ["layer ", layer]), h("label", {}, ["head ", head]), h("label", {}, ["temperature ", temp]), values]),
    out
  );
  layer.value = "0";
  head.value = "0";
  limits();
  show();
}

export default { render };
