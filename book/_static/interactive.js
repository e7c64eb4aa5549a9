// Interactive figures (inferlab.interactive): each <div class="inferlab-interactive"> carries a
// plotly.js spec (data-spec) computed by the library on a grid of the scenario; drawn here with the
// book's own copy of plotly.js (_static/plotly/), offline. The static figure above it stays for print.
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
                                                 modeBarButtonsToRemove: ["toImage", "select2d", "lasso2d"]});
  });
});
