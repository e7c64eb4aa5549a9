// Interactive figures (inferlab.notebook.interactive): each <div class="inferlab-interactive"> carries a
// plotly.js spec (data-spec) computed by the library on a grid of the scenario; drawn here with the
// book's own copy of plotly.js (_static/plotly/), offline. The static figure above it stays for print.
//
// A spec with `controls` (interactive.MenuGrid) holds one grid per combination of menu choices
// (model, accelerator, scheduler...): this script draws a <select> per menu above the plot and, on
// a menu change or a slider move, shows only the traces of the chosen grid at the slider's position,
// with that grid's title and its note for that position (what does not fit, and what would).
//
// Read anywhere: the figure's title is a line of HTML above the plot (it wraps to any width, and the
// plot's toolbar, inside the plot, can never cover it); on a phone (a plot under 500 px wide) there is
// no toolbar at all; after every redraw `inferlabDeclutter` moves apart what plotly placed on top of
// each other: the legend (above the plot), the x axis's title and the slider under it.
var INFERLAB_PHONE_PX = 500;

function inferlabBox(el) {
  if (!el) return null;
  var b = el.getBoundingClientRect();
  return b.width > 0 && b.height > 0 ? b : null;
}

function inferlabOverlap(a, b) {   // vertical overlap of two boxes that also overlap horizontally (px)
  if (!a || !b || a.right <= b.left || b.right <= a.left) return 0;
  return Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
}

function inferlabDeclutter(div, tries) {
  tries = tries === undefined ? 4 : tries;
  if (tries <= 0) return Promise.resolve();
  var legend = inferlabBox(div.querySelector(".legend")),
      xtitle = inferlabBox(div.querySelector(".xtitle")), slider = inferlabBox(div.querySelector(".slider-container"));
  var update = {};
  var under = inferlabOverlap(xtitle, slider) || inferlabOverlap(legend, slider);
  if (under > 0 && div.layout.sliders && div.layout.sliders.length) {
    update["sliders[0].pad.t"] = (div.layout.sliders[0].pad || {}).t + under + 6;
  }
  if (!Object.keys(update).length) return Promise.resolve();
  return Plotly.relayout(div, update).then(function () { return inferlabDeclutter(div, tries - 1); });
}

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
    var notes = c.notes ? c.notes[k][state.frame] : [];
    Plotly.restyle(div, {visible: visible});
    div._inferlabTitle.textContent = c.titles[k];
    Plotly.relayout(div, {annotations: notes})
      .then(function () { return inferlabDeclutter(div); });
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
  div.parentNode.insertBefore(bar, div._inferlabTitle);
  div.on("plotly_sliderchange", function (e) { state.frame = e.slider.active; show(); });
}

document.addEventListener("DOMContentLoaded", function () {
  if (!window.Plotly) return;
  document.querySelectorAll("div.inferlab-interactive").forEach(function (div) {
    var spec = JSON.parse(div.getAttribute("data-spec"));
    var width = div.clientWidth || 600;
    var phone = width < INFERLAB_PHONE_PX;
    var title = document.createElement("p");          // the title, as text above the plot
    title.className = "inferlab-plot-title";
    title.textContent = spec.layout.title.text;
    div.parentNode.insertBefore(title, div);
    div._inferlabTitle = title;
    spec.layout.title = {text: ""};
    spec.layout.margin.t = 30;                        // the legend's room; plotly widens it as needed
    if (phone) {                  // a phone: a plot a little shorter, narrower margins
      spec.layout.height = 460;
      spec.layout.margin = {l: 50, r: 8, t: spec.layout.margin.t, b: 10};
    }
    var config = {displaylogo: false, responsive: true, displayModeBar: phone ? false : "hover",
                  modeBarButtonsToRemove: ["toImage", "select2d", "lasso2d"]};
    Plotly.newPlot(div, spec.data, spec.layout, config)
      .then(function () { if (spec.controls) inferlabMenus(div, spec); })
      .then(function () { return inferlabDeclutter(div); })
      .then(function () {
        div.setAttribute("data-ready", "1");
        div.on("plotly_sliderchange", function () { setTimeout(function () { inferlabDeclutter(div); }, 0); });
      });
  });
});
