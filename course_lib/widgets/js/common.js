// Shared helpers of the course's widget front ends (prepended to each widget's module).
// Everything here runs in the page: no kernel, no network.

function h(tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") node.style.cssText = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of [].concat(children || [])) {
    if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;" })[c]);
}

// Python's format(x, f".{digits}g")
function fmtG(x, digits) {
  digits = digits || 6;
  if (x === 0) return "0";
  if (!isFinite(x)) return String(x);
  const exp = Math.floor(Math.log10(Math.abs(Number(x.toPrecision(digits)))));
  if (exp < -4 || exp >= digits) {
    let [m, e] = x.toExponential(digits - 1).split("e");
    if (m.includes(".")) m = m.replace(/0+$/, "").replace(/\.$/, "");
    const n = parseInt(e, 10);
    return `${m}e${n < 0 ? "-" : "+"}${String(Math.abs(n)).padStart(2, "0")}`;
  }
  let s = x.toFixed(Math.max(0, digits - 1 - exp));
  if (s.includes(".")) s = s.replace(/0+$/, "").replace(/\.$/, "");
  return s;
}

// Python's f"{n:,}"
function fmtInt(n) {
  return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

function button(label, title, onclick, cls) {
  return h("button", { type: "button", title: title || label, class: `course-w-button ${cls || ""}`, onclick }, label);
}

function errorBox() {
  return h("div", { class: "course-w-message", style: "color:#b00;min-height:1.2em" });
}

const COURSE_W_CSS =
  ".course-w{font-size:13px;margin:0.5em 0}.course-w table{border-collapse:collapse;margin:0.3em 0}" +
  ".course-w td,.course-w th{padding:1px 6px;border:1px solid #ddd}.course-w-button{margin:0 4px;padding:1px 8px}" +
  ".course-w-grid td{width:18px;height:18px;padding:0;border:1px solid #fff}" +
  ".course-w-grid th{font-weight:normal;font-size:11px;border:none;white-space:nowrap}" +
  ".course-w label{margin-right:10px}.course-w input[type=text]{width:16em}";

function root(el, cls) {
  const box = h("div", { class: `course-w ${cls}` }, [h("style", { text: COURSE_W_CSS })]);
  // Keys typed into the widget stay in the widget: in JupyterLab a key that reaches the
  // notebook is a command-mode shortcut (Enter edits the cell, "1" makes it a heading, "a"
  // inserts a cell), so Enter never reached the box as a change. ipywidgets' text boxes do the same.
  for (const type of ["keydown", "keypress", "keyup"]) box.addEventListener(type, (e) => e.stopPropagation());
  el.replaceChildren(box);
  return box;
}
