// The distillation chapter's temperature widget (course_lib/widgets/temperature.py,
// TemperatureWidget.widget): softmax(z / T), its entropy and the teacher's wrong answers,
// computed in the page from the logits in data.

function softened(z, t) {
  const s = z.map((x) => x / t);
  const top = Math.max(...s);
  const e = s.map((x) => Math.exp(x - top));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}

function entropy(p) {
  return -p.reduce((a, x) => a + x * Math.log(Math.max(x, 1e-300)), 0);
}

function render({ model, el }) {
  const data = model.get("data");
  const { labels, logits } = data;
  const trueIndex = data.true_index;
  const box = root(el, "course-w-temperature");
  const slider = h("input", { type: "range", min: "-0.5", max: "1.5", step: "0.05", class: "course-w-slider", style: "width:16em" });
  const number = h("input", { type: "number", min: "0.01", step: "any", class: "course-w-t", style: "width:6em" });
  const message = errorBox();
  const out = h("div", { class: "course-w-out" });

  function show(t) {
    const p = softened(logits, t);
    const hT = entropy(p);
    const head = h("tr", {}, [h("th"), ...labels.map((x) => h("th", {}, x)), h("th", {}, "entropy (nats)")]);
    const row = h("tr", {}, [h("td", {}, `T = ${fmtG(t)}`), ...p.map((x) => h("td", {}, x.toFixed(3))), h("td", {}, hT.toFixed(2))]);
    let top = 0;
    p.forEach((x, i) => { if (x > p[top]) top = i; });
    let text = `T = ${fmtG(t)}: entropy ${hT.toFixed(2)} nats, top answer ${labels[top]}`;
    if (trueIndex !== null && trueIndex !== undefined) {
      const order = [...p.keys()].sort((a, b) => p[b] - p[a] || a - b).filter((i) => i !== trueIndex);
      text += "; wrong answers in the teacher's order: " + order.slice(0, 3).map((i) => `${labels[i]} ${p[i].toFixed(3)}`).join(", ");
    }
    out.replaceChildren(h("table", { class: "course-w-soft" }, [head, row]), h("p", { class: "course-w-summary" }, text));
  }

  function setT(t, from) {
    if (!(t > 0) || !isFinite(t)) {
      message.textContent = `the temperature must be a positive number, got ${number.value}`;
      return;
    }
    message.textContent = "";
    if (from !== "number") number.value = fmtG(t);
    if (from !== "slider") slider.value = String(Math.log10(t));
    show(t);
  }

  slider.addEventListener("input", () => setT(10 ** Number(slider.value), "slider"));
  number.addEventListener("change", () => setT(Number(number.value), "number"));
  box.append(h("div", {}, [h("label", {}, ["T ", slider]), h("label", {}, ["T = ", number])]), message, out);
  setT(data.temperature);
}

export default { render };
