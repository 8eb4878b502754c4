// XLNet's permutation widget (course_lib/widgets/permutation.py, PermutationWidget.widget).
// In the page: parsing and checking a typed order, both streams' masks, the factorisation
// table. Precomputed in data: the tokens, the sampled orders ("sample" walks through them)
// and each step's log-probability for the orders the notebook computed; for any other order
// a kernel computes them on request (the page says so without one).

const HIDDEN = 0, VISIBLE = 1, ITSELF = 2, NO_QUERY = 3;
const COLOURS = ["#f2f2f2", "#3b7dd8", "#f0a030", "#c8c8c8"];

function listPositions(items) {
  return items.join(", ");
}

// check_order(items, n, one_based=True) -> 0-based positions, or throws Error(message)
function checkOrder(items, n) {
  const base = 1, counting = "counted from 1";
  if (!items.length) throw new Error(`the order is empty: list each of the ${n} positions once`);
  const outside = [...new Set(items.filter((p) => !(base <= p && p < n + base)))].sort((a, b) => a - b);
  if (outside.length) {
    throw new Error(
      `position${outside.length > 1 ? "s" : ""} ${listPositions(outside)} out of range: ` +
        `a ${n}-token sentence has positions ${base}..${n - 1 + base} (${counting})`
    );
  }
  const problems = [];
  const count = (p) => items.filter((q) => q === p).length;
  const repeated = [...new Set(items.filter((p) => count(p) > 1))].sort((a, b) => a - b);
  if (repeated.length) {
    const many = repeated.length > 1;
    problems.push(`position${many ? "s" : ""} ${listPositions(repeated)} appear${many ? "" : "s"} more than once`);
  }
  const missing = [];
  for (let p = base; p < n + base; p++) if (!items.includes(p)) missing.push(p);
  if (missing.length) problems.push(`the order leaves out position${missing.length > 1 ? "s" : ""} ${listPositions(missing)}`);
  if (problems.length) throw new Error(`${problems.join("; ")}: an order lists each of the ${n} positions once (${counting})`);
  return items.map((p) => p - base);
}

// parse_order(text, n) (1-based)
function parseOrder(text, n) {
  const parts = text.trim().split(/[\s,;]+|->|→/).filter((p) => p);
  if (!parts.length) throw new Error(`type an order, e.g. ${[...Array(n).keys()].map((i) => i + 1).join(" ")}`);
  const items = parts.map((p) => {
    if (!/^[+-]?\d+$/.test(p)) throw new Error(`'${p}' is not a position: type whole numbers, e.g. 3 2 4 1`);
    return parseInt(p, 10);
  });
  return checkOrder(items, n);
}

// permutation_view(tokens, order) with every token a target: the two grids as cell codes
function view(order) {
  const n = order.length;
  const rank = new Array(n);
  order.forEach((p, t) => (rank[p] = t));
  const content = [], query = [];
  for (let i = 0; i < n; i++) {
    content.push([]);
    query.push([]);
    for (let j = 0; j < n; j++) {
      content[i].push(i === j ? ITSELF : rank[j] < rank[i] ? VISIBLE : HIDDEN);
      query[i].push(rank[j] < rank[i] ? VISIBLE : HIDDEN);
    }
  }
  return { order, rank, content, query };
}

function grid(title, codes, idx, labels, name) {
  const head = h("tr", {}, [h("th"), ...idx.map((j) => h("th", { style: "writing-mode:vertical-rl" }, labels[j]))]);
  const rows = idx.map((i) =>
    h("tr", {}, [
      h("th", { style: "text-align:right" }, labels[i]),
      ...idx.map((j) =>
        h("td", { "data-i": i, "data-j": j, "data-code": codes[i][j], style: `background:${COLOURS[codes[i][j]]}` })
      ),
    ])
  );
  return h("div", { style: "display:inline-block;vertical-align:top;margin-right:18px" }, [
    h("div", { style: "font-size:12px" }, title),
    h("table", { class: `course-w-grid course-w-${name}` }, [head, ...rows]),
  ]);
}

function render({ model, el }) {
  const data = model.get("data");
  const tokens = data.tokens, n = tokens.length;
  const labels = tokens.map((t, i) => `${i + 1} ${t}`);
  const key = (order) => order.join(" ");
  let order = data.order.slice();
  let samples = 0;
  const asked = new Set();

  const box = root(el, "course-w-permutation");
  const input = h("input", { type: "text", class: "course-w-order", placeholder: labels.map((_, i) => i + 1).join(" ") });
  const sort = h("input", { type: "checkbox", class: "course-w-sort" });
  const message = errorBox();
  const grids = h("div", { class: "course-w-grids" });
  const table = h("div", { class: "course-w-table" });
  const legend = h(
    "div",
    { style: "font-size:11px" },
    [VISIBLE, ITSELF].map((c) =>
      h("span", { style: "margin-right:12px" }, [
        h("span", { style: `display:inline-block;width:10px;height:10px;background:${COLOURS[c]}` }),
        c === VISIBLE ? " may attend (before it in the order)" : " itself (content stream only)",
      ])
    )
  );

  function stepLogProbs(k) {
    const pre = (data.log_probs || {})[k];
    if (pre) return pre;
    const got = (model.get("extra") || {})[k];
    return got && got.log_probs ? got.log_probs : null;
  }

  function show() {
    input.value = order.map((p) => p + 1).join(" ");
    const v = view(order);
    const idx = sort.checked ? order.slice() : [...Array(n).keys()];
    grids.replaceChildren(
      grid("content stream h_i: sees itself", v.content, idx, labels, "content"),
      grid("query stream g_i: predicts x_i, never sees it", v.query, idx, labels, "query")
    );
    const k = key(order);
    const logp = data.has_model ? stepLogProbs(k) : null;
    const rows = [h("tr", {}, ["step", "predicts", "from", ...(logp ? ["probability"] : [])].map((x) => h("th", {}, x)))];
    order.forEach((i, t) => {
      const ctx = order.slice(0, t);
      const seen = ctx.length ? ctx.map((j) => tokens[j]).join(" ") : "(nothing)";
      const cells = [String(t + 1), labels[i], seen, ...(logp ? [Math.exp(logp[t]).toFixed(4)] : [])];
      rows.push(h("tr", {}, cells.map((c) => h("td", {}, c))));
    });
    let summary = `order ${order.map((p) => p + 1).join(" -> ")} (positions counted from 1)`;
    if (logp) {
      const total = logp.reduce((a, b) => a + b, 0);
      summary += `; p(sentence) under this order = ${fmtG(Math.exp(total), 4)} (log ${total.toFixed(4)})`;
    }
    const notes = [];
    if (data.has_model && !logp) {
      const err = ((model.get("extra") || {})[k] || {}).error;
      notes.push(
        h("p", { class: "course-w-needs-kernel", style: "color:#666" },
          err || `The page holds the model's probabilities for ${Object.keys(data.log_probs).length} orders ` +
            "(the first one, left to right and the sampled ones); run the notebook for this order's.")
      );
      if (!asked.has(k)) {
        asked.add(k); // ask the kernel once per order (nobody answers in the static page)
        model.send({ key: k, order });
      }
    }
    table.replaceChildren(
      h("table", { style: "font-family:monospace;font-size:12px", class: "course-w-steps" }, rows),
      h("p", { class: "course-w-summary" }, summary),
      ...notes
    );
  }

  function setOrder(o) {
    order = o;
    message.textContent = "";
    show();
  }

  input.addEventListener("change", () => {
    try {
      setOrder(parseOrder(input.value, n));
    } catch (e) {
      message.textContent = e.message;
    }
  });
  sort.addEventListener("change", show);
  const sampleButton = button("sample", "a random order (the next one the notebook drew)", () => {
    setOrder(data.samples[samples % data.samples.length].slice());
    samples += 1;
  }, "course-w-sample");
  const ltr = button("left to right", "1 2 ... T", () => setOrder([...Array(n).keys()]), "course-w-ltr");
  model.on("change:extra", show);
  box.append(
    h("div", {}, [h("label", {}, ["order ", input]), sampleButton, ltr, h("label", {}, [sort, " sort by the order"])]),
    message,
    grids,
    legend,
    table
  );
  show();
  return () => model.off("change:extra", show);
}

export default { render };
