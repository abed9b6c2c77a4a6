/* The dashboard's own script: the live indicator of the server-sent event stream. */
(function () {
  "use strict";
  function dot(on) {
    var el = document.getElementById("live-dot");
    if (!el) return;
    el.classList.toggle("on", on);
    el.title = on ? "live: updates are pushed by the server" : "not connected";
  }
  document.addEventListener("htmx:sseOpen", function () { dot(true); });
  document.addEventListener("htmx:sseError", function () { dot(false); });
  document.addEventListener("htmx:sseMessage", function () {
    dot(true);
    var stamp = document.getElementById("updated");
    if (stamp) stamp.textContent = new Date().toLocaleTimeString();
  });
})();
