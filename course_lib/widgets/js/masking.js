// BERT's masking widget (course_lib/widgets/masking.py, MaskingWidget.widget). Every draw the
// controls can reach (sentence x masking rate x seed) was drawn by MaskingWidget.draw when the
// notebook ran, with the model's top predictions; the page picks and shows it. With a kernel a
// typed sentence is drawn on request.

const ROW_COLOURS = { "[MASK]": "#dbe9ff", random: "#ffe3c4", kept: "#e4f5dc", "": "transparent" };

// Python's format(x, ".0%")
function pct0(x) {
  const v = x * 100, f = Math.floor(v);
  const r = v - f === 0.5 ? (f % 2 === 0 ? f : f + 1) : Math.round(v);
  return `${r}%`;
}

function render({ model, el }) {
  const data = model.get("data");
  const sentences = data.sentences.map((s) => ({ ...s, vocab: data.vocab }));
  let current = 0, rate = data.rate, seedIndex = 0;

  const box = root(el, "course-w-masking");
  const menu = h("select", { class: "course-w-sentence" });
  const typed = h("input", { type: "text", class: "course-w-typed", placeholder: "another sentence (needs a kernel)" });
  const slider = h("input", { type: "range", min: "0", max: String(data.rates.length - 1), step: "1", class: "course-w-rate" });
  const rateText = h("span", { class: "course-w-rate-value" });
  const message = errorBox();
  const out = h("div", { class: "course-w-out" });

  function fillMenu() {
    menu.replaceChildren(...sentences.map((s, i) => h("option", { value: String(i) }, s.text)));
    menu.value = String(current);
  }

  function show() {
    const s = sentences[current];
    const v = s.vocab;
    const d = s.draws[rate][seedIndex];
    rateText.textContent = ` ${data.rates[rate]}`;
    slider.value = String(rate);
    const head = h("tr", {}, ["token", "chosen", "became", "model reads", "top predictions"].map((x) => h("th", {}, x)));
    const counts = { "[MASK]": 0, random: 0, kept: 0 };
    let chosen = 0, right = 0;
    const rows = s.tokens.map((t, i) => {
      const token = v[t], action = data.actions[d.a[i]], preds = d.p[i];
      if (action) {
        chosen += 1;
        counts[action] += 1;
        if (preds.length && v[preds[0][0]] === token) right += 1;
      }
      const predCell = h("td", {}, []);
      preds.forEach(([w, p], k) => {
        if (k) predCell.append(", ");
        predCell.append(v[w] === token ? h("b", { style: "color:#1a7f37" }, v[w]) : v[w], ` ${p.toFixed(2)}`);
      });
      return h("tr", { style: `background:${ROW_COLOURS[action]}` }, [
        h("td", {}, token), h("td", {}, action ? "yes" : ""), h("td", {}, action), h("td", {}, h("code", {}, v[d.s[i]])), predCell,
      ]);
    });
    let summary = `chosen ${chosen} of ${s.tokens.length} tokens: ${counts["[MASK]"]} [MASK], ${counts.random} random, ${counts.kept} kept`;
    if (chosen) summary += `; top-1 right at ${pct0(right / chosen)} of them`;
    out.replaceChildren(
      h("table", { style: "font-family:monospace;font-size:12px", class: "course-w-draw" }, [head, ...rows]),
      h("p", { class: "course-w-summary" }, summary),
      h("p", { class: "course-w-which", style: "color:#666;font-size:11px" },
        `draw ${seedIndex + 1} of ${data.n_seeds} (seed ${data.seed + seedIndex}), precomputed when the notebook ran`)
    );
  }

  menu.addEventListener("change", () => { current = Number(menu.value); seedIndex = 0; show(); });
  slider.addEventListener("input", () => { rate = Number(slider.value); show(); });
  const redraw = button("redraw", "a new random draw (the next seed)", () => {
    seedIndex = (seedIndex + 1) % data.n_seeds;
    show();
  }, "course-w-redraw");
  typed.addEventListener("change", () => {
    const text = typed.value;
    if (!text.trim()) return;
    message.style.color = "#666";
    message.textContent = "Drawing this sentence needs the model: run the notebook (with a kernel it appears in the menu).";
    model.send({ key: text, text, rates: data.rates, n_seeds: data.n_seeds });
  });
  model.on("change:extra", () => {
    const extra = model.get("extra") || {};
    for (const [key, answer] of Object.entries(extra)) {
      if (answer.error) { message.style.color = "#b00"; message.textContent = answer.error; continue; }
      if (sentences.some((s) => s.text === key)) continue;
      sentences.push({ ...answer.sentence, vocab: answer.vocab });
      current = sentences.length - 1;
      seedIndex = 0;
      message.textContent = "";
      fillMenu();
      show();
    }
  });
  box.append(
    h("div", {}, [h("label", {}, ["sentence ", menu]), typed]),
    h("div", {}, [h("label", {}, ["mlm_probability ", slider, rateText]), redraw]),
    message,
    out
  );
  fillMenu();
  show();
}

export default { render };
