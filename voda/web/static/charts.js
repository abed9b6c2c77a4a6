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

  // Axis and grid colours from the page's (voda.css: --chart-axis, --chart-grid), so the charts
  // follow the light or dark scheme.
  function theme() {
    var style = window.getComputedStyle(document.documentElement);
    function get(name, fallback) { return style.getPropertyValue(name).trim() || fallback; }
    return {axis: get("--chart-axis", "#555"), grid: get("--chart-grid", "#eee")};
  }

  function options(spec, width) {
    var colours = theme();
    var x = spec.x || {}, y = spec.y || {};
    var xScale = {time: !!x.time};
    if (x.log) { xScale.distr = 3; xScale.log = 10; }
    var yScale = {};
    if (y.log) { yScale.distr = 3; yScale.log = 10; }
    if (y.min !== undefined) yScale.range = function (u, lo, hi) {
      return [y.min, Math.max(hi, y.min + 1) * 1.05];
    };
    var xAxis = {label: x.label || "", stroke: colours.axis, grid: {stroke: colours.grid},
                 ticks: {stroke: colours.grid}};
    if (x.integer) xAxis.incrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
    if (x.labels) {
      xAxis.values = function (u, vals) {
        // every label while they fit (about 36 px each), every other one (or fewer) when not
        var px = u.over ? u.over.clientWidth : 600;
        var every = Math.max(1, Math.ceil(36 * x.labels.length / Math.max(px, 1)));
        return vals.map(function (v) {
          return Number.isInteger(v) && v % every === 0 ? (x.labels[v] || "") : "";
        });
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
      axes: [xAxis, {label: y.label || "", stroke: colours.axis, grid: {stroke: colours.grid},
                     ticks: {stroke: colours.grid}, size: 60}],
      series: [{label: x.label || "x"}].concat(
        (spec.series || []).map(function (s, i) { return series(s, i, spec.kind); })),
    };
  }

  function widthOf(host) {
    return Math.max(200, Math.floor(host.getBoundingClientRect().width || 600));
  }

  function draw(el) {
    if (el._voda_chart) return;
    var text = el.getAttribute("data-spec");
    if (!text) return;
    var spec = JSON.parse(text);
    var host = el.querySelector(".plot") || el;
    var width = widthOf(host);
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

  function drawn() {
    return Array.prototype.filter.call(document.querySelectorAll("[data-chart]"),
                                       function (el) { return el._voda_chart; });
  }

  // Charts are drawn at their box's width: drawn again when it changes (a phone turned, a
  // window resized), and in the other colours when the colour scheme changes.
  var resizing = null;
  window.addEventListener("resize", function () {
    window.clearTimeout(resizing);
    resizing = window.setTimeout(function () {
      drawn().forEach(function (el) {
        var host = el.querySelector(".plot") || el;
        var chart = el._voda_chart;
        chart.setSize({width: widthOf(host), height: chart.height});
      });
    }, 150);
  });
  if (window.matchMedia) {
    var scheme = window.matchMedia("(prefers-color-scheme: dark)");
    var redraw = function () {
      drawn().forEach(function (el) {
        el._voda_chart.destroy();
        el._voda_chart = null;
        draw(el);
      });
    };
    if (scheme.addEventListener) scheme.addEventListener("change", redraw);
  }

  window.vodaCharts = {render: render, draw: draw, PALETTE: PALETTE};
  document.addEventListener("DOMContentLoaded", function () { render(document); });
  ["htmx:afterSettle", "htmx:sseMessage", "htmx:afterSwap"].forEach(function (name) {
    document.addEventListener(name, function (e) { render(e.target); });
  });
})();
