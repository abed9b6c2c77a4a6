/* Charts of the dashboard and of the simulation report, drawn with uPlot.
 *
 * A chart is an element with a data-chart attribute and its spec as JSON in data-spec (not in
 * a <script> element: htmx drops those from the fragments it swaps in):
 *   {kind: "lines" | "bars", title, height,
 *    x: {label, time (epoch seconds), log, labels (bars: one per bar), rotate (degrees)},
 *    y: {label, log},
 *    xs: [x values], series: [{label, values, color, step, points, dash, width}]}
 * Series share the xs; a null value is a gap (lines span gaps unless they are points).
 * dash: true (dashed) or an on/off pattern in pixels ([] or absent: solid).
 */
(function () {
  "use strict";
  var PALETTE = ["#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2",
                 "#97bbf5", "#9c6b4e", "#9498a0"];

  function series(s, i, kind) {
    var color = s.color || PALETTE[i % PALETTE.length];
    var out = {label: s.label, stroke: color, width: s.width || 2, spanGaps: !s.points};
    if (Array.isArray(s.dash)) {
      if (s.dash.length) out.dash = s.dash;
    } else if (s.dash) {
      out.dash = [6, 4];
    }
    if (kind === "bars") {
      out.fill = color + "cc";
      out.paths = uPlot.paths.bars({size: [0.7, 80]});
      out.points = {show: false};
    } else if (s.points) {
      out.paths = function () { return null; };
      out.points = {show: true, size: s.size || 9, fill: color, stroke: color};
    } else {
      if (s.step) out.paths = uPlot.paths.stepped({align: 1});
      out.points = {show: false};
    }
    return out;
  }

  function options(spec, width) {
    var x = spec.x || {}, y = spec.y || {};
    var xScale = {time: !!x.time};
    if (x.log) { xScale.distr = 3; xScale.log = 10; }
    var yScale = {};
    if (y.log) { yScale.distr = 3; yScale.log = 10; }
    if (y.min !== undefined) yScale.range = function (u, lo, hi) {
      return [y.min, Math.max(hi, y.min + 1) * 1.05];
    };
    var xAxis = {label: x.label || "", stroke: "#555", grid: {stroke: "#eee"}};
    if (x.integer) xAxis.incrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
    if (x.labels) {
      xAxis.values = function (u, vals) {
        return vals.map(function (v) { return Number.isInteger(v) ? (x.labels[v] || "") : ""; });
      };
      xScale.range = function () { return [-0.5, x.labels.length - 0.5]; };
      xAxis.splits = function () { return x.labels.map(function (_, i) { return i; }); };
    }
    if (x.rotate) {
      xAxis.rotate = x.rotate;
      xAxis.size = 90;
    }
    return {
      title: spec.title || "",
      width: width,
      height: spec.height || 240,
      scales: {x: xScale, y: yScale},
      legend: {show: spec.legend !== false, live: false},
      cursor: {drag: {x: true, y: false}},
      axes: [xAxis, {label: y.label || "", stroke: "#555", grid: {stroke: "#eee"}, size: 60}],
      series: [{label: x.label || "x"}].concat(
        (spec.series || []).map(function (s, i) { return series(s, i, spec.kind); })),
    };
  }

  function draw(el) {
    if (el._voda_chart) return;
    var text = el.getAttribute("data-spec");
    if (!text) return;
    var spec = JSON.parse(text);
    var host = el.querySelector(".plot") || el;
    var width = Math.max(280, Math.floor(host.getBoundingClientRect().width || 600));
    var data = [spec.xs].concat((spec.series || []).map(function (s) { return s.values; }));
    host.innerHTML = "";
    el._voda_chart = new uPlot(options(spec, width), data, host);
    el.setAttribute("data-drawn", "1");
  }

  function render(root) {
    var scope = root && root.querySelectorAll ? root : document;
    if (scope.matches && scope.matches("[data-chart]")) draw(scope);
    scope.querySelectorAll("[data-chart]").forEach(draw);
  }

  window.vodaCharts = {render: render, draw: draw, PALETTE: PALETTE};
  document.addEventListener("DOMContentLoaded", function () { render(document); });
  ["htmx:afterSettle", "htmx:sseMessage", "htmx:afterSwap"].forEach(function (name) {
    document.addEventListener(name, function (e) { render(e.target); });
  });
})();
