// The parameter counter (course_lib/widgets/parameters.py, ParameterCounter.widget): the
// formulas of course_lib/models/sizes.py (parameter_breakdown, sublayer_counts) and the
// checks of size_config, computed in the page.

const PARTS = ["embeddings", "attention", "ffn", "pooler", "heads"];
const PART_LABELS = { embeddings: "embeddings", attention: "attention", ffn: "feed-forward", pooler: "pooler", heads: "heads" };
const PART_COLOURS = { embeddings: "#4c72b0", attention: "#dd8452", ffn: "#55a868", pooler: "#8172b3", heads: "#937860" };
const SIZES = [
  ["vocab_size", "V (vocab)"], ["embedding_size", "E (embed)"], ["hidden_size", "H (hidden)"],
  ["num_hidden_layers", "L (layers)"], ["num_attention_heads", "heads"], ["intermediate_size", "I (FFN)"],
];

// Python's f"{x:.{d}f}" (ties to even on the decimal value)
function fixedPy(x, d) {
  const v = x * 10 ** d, f = Math.floor(v);
  if (v - f === 0.5) return ((f % 2 === 0 ? f : f + 1) / 10 ** d).toFixed(d);
  return x.toFixed(d);
}

function millions(n, d) {
  return `${fixedPy(n / 1e6, d || 0)}M`;
}

function nearbyHeads(hidden, heads) {
  const divisors = [];
  for (let d = 1; d <= hidden; d++) if (hidden % d === 0) divisors.push(d);
  const below = divisors.filter((d) => d < heads), above = divisors.filter((d) => d > heads);
  return [...(below.length ? [below[below.length - 1]] : []), ...(above.length ? [above[0]] : [])].map((d) => `${d} heads`).join(" or ");
}

// size_config's checks; throws Error(message)
function checkSizes(s) {
  for (const [name] of SIZES) {
    const v = s[name];
    if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive whole number, got ${Number.isNaN(v) ? "''" : v}`);
  }
  if (s.hidden_size % s.num_attention_heads) {
    throw new Error(
      `hidden_size=${s.hidden_size} is not divisible by num_attention_heads=${s.num_attention_heads}: ` +
        `each head works in hidden_size / heads dimensions (try ${nearbyHeads(s.hidden_size, s.num_attention_heads)})`
    );
  }
}

function sublayers(s, albert, fixed) {
  const L = s.num_hidden_layers;
  if (!albert) return [L, L];
  const gi = fixed.num_hidden_groups * fixed.inner_group_num;
  if (s.sharing === "all") return [gi, gi];
  if (s.sharing === "attention") return [1, L];
  if (s.sharing === "ffn") return [L, 1];
  return [L, L];
}

function breakdown(s, albert, fixed, pooler, heads) {
  const [nAtt, nFfn] = sublayers(s, albert, fixed);
  const V = s.vocab_size, P = fixed.max_position_embeddings, T = fixed.type_vocab_size;
  const H = s.hidden_size, I = s.intermediate_size, E = albert ? s.embedding_size : H;
  let embeddings = (V + P + T) * E + 2 * E;
  if (albert) embeddings += E * H + H;
  const attention = 4 * (H * H + H) + 2 * H;
  const ffn = H * I + I + (I * H + H) + 2 * H;
  let head = 0;
  if (heads) {
    head = H * E + E + 2 * E + V;
    if (!fixed.tie_word_embeddings) head += V * E;
    if (heads === "pretraining") head += 2 * H + 2;
  }
  const parts = { embeddings, attention: nAtt * attention, ffn: nFfn * ffn, pooler: pooler ? H * H + H : 0, heads: head };
  parts.total = PARTS.reduce((a, p) => a + parts[p], 0);
  parts.sub = [nAtt, nFfn];
  return parts;
}

function render({ model, el }) {
  const data = model.get("data");
  const fixed = data.fixed;
  const box = root(el, "course-w-parameters");
  const preset = h("select", { class: "course-w-preset" }, ["custom", ...Object.keys(data.presets)].map((p) => h("option", { value: p }, p)));
  const which = h("select", { class: "course-w-model" }, ["BERT", "ALBERT"].map((p) => h("option", { value: p }, p)));
  const inputs = Object.fromEntries(SIZES.map(([name]) => [name, h("input", { type: "number", min: "0", class: `course-w-${name}`, style: "width:7em" })]));
  const sharing = h("select", { class: "course-w-sharing" }, data.sharing_modes.map((m) => h("option", { value: m }, m)));
  const pooler = h("input", { type: "checkbox", class: "course-w-pooler" });
  const heads = h("select", { class: "course-w-heads" }, [["", "none"], ["mlm", "MLM"], ["pretraining", "MLM + NSP/SOP"]].map(([v, t]) => h("option", { value: v }, t)));
  const message = errorBox();
  const out = h("div", { class: "course-w-out" });

  function setControls(s) {
    which.value = s.model;
    sharing.value = s.sharing;
    for (const [name] of SIZES) inputs[name].value = String(s[name]);
  }

  function show() {
    const albert = which.value === "ALBERT";
    inputs.embedding_size.disabled = !albert;
    sharing.disabled = !albert;
    const s = { sharing: sharing.value };
    for (const [name] of SIZES) s[name] = inputs[name].value.trim() === "" ? NaN : Number(inputs[name].value);
    if (!albert) s.embedding_size = s.hidden_size;
    const hd = heads.value || null;
    try {
      checkSizes(s);
      if (hd === "pretraining" && !pooler.checked) throw new Error("the pretraining heads read the pooler's output: pooler=False does not fit them");
    } catch (e) {
      message.textContent = e.message;
      return;
    }
    message.textContent = "";
    const b = breakdown(s, albert, fixed, pooler.checked, hd);
    const ref = albert ? breakdown({ ...s, embedding_size: s.hidden_size }, false, fixed, pooler.checked, hd) : null;
    const L = s.num_hidden_layers;
    const label = (p) => (p === "attention" ? `attention (${b.sub[0]} distinct for ${L} layers)` : p === "ffn" ? `feed-forward (${b.sub[1]} distinct for ${L} layers)` : PART_LABELS[p] || p);
    const rows = [h("tr", {}, ["part", "parameters", "share", ...(ref ? ["same-size BERT"] : [])].map((x) => h("th", {}, x)))];
    for (const p of [...PARTS, "total"]) {
      const first = p in PART_COLOURS ? [h("span", { style: `color:${PART_COLOURS[p]}` }, "■"), ` ${label(p)}`] : [h("b", {}, label(p))];
      const share = b.total ? b[p] / b.total : 0;
      rows.push(h("tr", { "data-part": p }, [
        h("td", {}, first), h("td", { style: "text-align:right" }, fmtInt(b[p])), h("td", { style: "text-align:right" }, `${fixedPy(share * 100, 1)}%`),
        ...(ref ? [h("td", { style: "text-align:right" }, fmtInt(ref[p]))] : []),
      ]));
    }
    const name = albert ? `ALBERT (E=${s.embedding_size}, sharing ${s.sharing})` : "BERT";
    let summary = `${name}: ${fmtInt(b.total)} parameters (${millions(b.total)}, ${millions(b.total, 2)})`;
    if (ref) summary += `; the BERT of the same sizes has ${fmtInt(ref.total)} (${millions(ref.total)}): ${fixedPy((b.total / ref.total) * 100, 1)}% of it`;
    // stacked bars, in millions (the figure of plot_breakdown)
    const bars = [[name, b], ...(ref ? [["BERT, same V, H, L, I", ref]] : [])];
    const most = Math.max(...bars.map(([, x]) => x.total)) || 1;
    const barRows = bars.map(([n, x]) =>
      h("div", { style: "display:flex;align-items:center;font-size:11px;margin:2px 0" }, [
        h("span", { style: "width:16em" }, n),
        ...PARTS.map((p) => h("span", { title: `${PART_LABELS[p]}: ${fmtInt(x[p])}`, style: `display:inline-block;height:14px;background:${PART_COLOURS[p]};width:${(60 * x[p]) / most}%` })),
        h("span", {}, ` ${millions(x.total, 2)}`),
      ])
    );
    out.replaceChildren(h("table", { class: "course-w-counts", style: "font-family:monospace;font-size:12px" }, rows), h("p", { class: "course-w-summary" }, summary), ...barRows);
  }

  preset.addEventListener("change", () => {
    if (preset.value !== "custom") setControls(data.presets[preset.value]);
    show();
  });
  for (const w of [which, sharing, pooler, heads, ...Object.values(inputs)]) {
    w.addEventListener("change", () => { preset.value = "custom"; show(); });
  }
  box.append(
    h("div", {}, [h("label", {}, ["preset ", preset]), h("label", {}, ["model ", which])]),
    h("div", {}, SIZES.map(([name, text]) => h("label", {}, [`${text} `, inputs[name]]))),
    h("div", {}, [h("label", {}, ["sharing ", sharing]), h("label", {}, [pooler, " pooler"]), h("label", {}, ["heads ", heads])]),
    message,
    out
  );
  setControls(data.settings);
  pooler.checked = data.pooler;
  heads.value = data.heads || "";
  show();
}

export default { render };
