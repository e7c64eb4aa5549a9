// A display equation wider than its box scrolls inside it (custom.css); on a phone that is easy to
// miss, so each one that does gets a visible cue under it and a class (scrolls-x) for the fade on its
// right edge. Run once MathJax has typeset the page, and again when the window's width changes;
// `data-scroll-cues` on <body> says when the cues are in place (the browser tests wait for it).
(function () {
  var CUE = "\u21e0 scroll sideways for the rest of the equation \u21e2";
  function mark() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (c) {
      var wide = c.scrollWidth > c.clientWidth + 1;
      var holder = c.closest("div.math") || c;
      var next = holder.nextElementSibling;
      var cue = next && next.classList.contains("scroll-cue") ? next : null;
      if (wide && !cue) {
        cue = document.createElement("p");
        cue.className = "scroll-cue";
        cue.setAttribute("aria-hidden", "true");
        cue.textContent = CUE;
        holder.parentNode.insertBefore(cue, holder.nextSibling);
      } else if (!wide && cue) {
        cue.remove();
      }
      c.classList.toggle("scrolls-x", wide);
    });
    document.body.setAttribute("data-scroll-cues", "done");
  }
  function start() {
    var ready = window.MathJax && MathJax.startup && MathJax.startup.promise;
    (ready ? MathJax.startup.promise : Promise.resolve()).then(mark);
    var timer = null;
    window.addEventListener("resize", function () {
      clearTimeout(timer);
      timer = setTimeout(mark, 150);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
