// Interactive figures (inferlab.interactive): each <div class="inferlab-interactive"> carries a
// plotly.js spec (data-spec) computed by the library on a grid of the scenario; drawn here with the
// book's own copy of plotly.js (_static/plotly/), offline. The static figure above it stays for print.
//
// A spec with `controls` (interactive.MenuGrid) holds one grid per combination of menu choices
// (model, accelerator, scheduler...): this script draws a <select> per menu above the plot and, on
// a menu change or a slider move, shows only the traces of the chosen grid at the slider's position.
function inferlabMenus(div, spec) {
  var c = spec.controls;
  var state = {choice: c.menus.map(function (m) { return m.active; }), frame: c.frame};
  function combo() {
    var key = state.choice.join(",");
    for (var i = 0; i < c.combos.length; i++) if (c.combos[i].join(",") === key) return i;
    return -1;
  }
  function show() {
    var k = combo();
    var visible = c.owner.map(function (o) { return o[0] === k && o[1] === state.frame; });
    Plotly.restyle(div, {visible: visible});
    Plotly.relayout(div, {"title.text": c.titles[k]});
  }
  var bar = document.createElement("div");
  bar.className = "inferlab-menus";
  c.menus.forEach(function (m, i) {
    var label = document.createElement("label");
    label.appendChild(document.createTextNode(m.label + " "));
    var select = document.createElement("select");
    select.setAttribute("data-menu", m.label);
    m.values.forEach(function (v, j) {
      var opt = document.createElement("option");
      opt.value = String(j);
      opt.textContent = v;
      if (j === m.active) opt.selected = true;
      select.appendChild(opt);
    });
    select.addEventListener("change", function () { state.choice[i] = Number(select.value); show(); });
    label.appendChild(select);
    bar.appendChild(label);
  });
  div.parentNode.insertBefore(bar, div);
  div.on("plotly_sliderchange", function (e) { state.frame = e.slider.active; show(); });
}

document.addEventListener("DOMContentLoaded", function () {
  if (!window.Plotly) return;
  document.querySelectorAll("div.inferlab-interactive").forEach(function (div) {
    var spec = JSON.parse(div.getAttribute("data-spec"));
    var width = div.clientWidth || 600;
    if (width < 500) {            // a phone: a shorter plot, the legend under it
      spec.layout.height = 420;
      spec.layout.margin = {l: 50, r: 8, t: 40, b: 10};
    }
    Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false, responsive: true,
                                                 modeBarButtonsToRemove: ["toImage", "select2d", "lasso2d"]})
      .then(function () { if (spec.controls) inferlabMenus(div, spec); });
  });
});
