/* The simulation report's own script: the per-job timeline (the chosen job's GPUs over
 * time under every algorithm, drawn when a job is picked from the list) and the
 * algorithm picker (checkboxes that show or hide an algorithm's series in every chart
 * and its rows in every table). */
(function () {
  "use strict";
  function data() {
    return JSON.parse(document.getElementById("report-data").textContent);
  }

  function spec(report, name) {
    var job = report.jobs[name];
    var xs = {};
    xs[job.submit] = true;
    job.runs.forEach(function (run) {
      if (!run) return;
      run[0].forEach(function (t) { xs[t] = true; });
      if (run[2] !== null) xs[run[2]] = true;
    });
    var times = Object.keys(xs).map(Number).sort(function (a, b) { return a - b; });
    var series = job.runs.map(function (run, i) {
      var values = times.map(function () { return null; });
      if (run) {
        var k = 0, held = 0;
        times.forEach(function (t, j) {
          while (k < run[0].length && run[0][k] <= t) { held = run[1][k]; k++; }
          if (t >= job.submit && (run[2] === null || t <= run[2])) values[j] = held;
        });
      }
      var style = (report.styles || [])[i] || {};
      return {label: report.algorithms[i], values: values, step: true, color: style.color,
              dash: style.dash};
    });
    return {kind: "lines", title: "GPUs held by " + name, height: 300,
            x: {label: "hours since the first arrival"}, y: {label: "GPUs", min: 0},
            xs: times.map(function (t) { return t / 3600; }), series: series};
  }

  function show(name) {
    var report = data();
    var el = document.getElementById("job-chart");
    if (!report.jobs[name]) return;
    el.innerHTML = '<div class="plot"></div>';
    el.setAttribute("data-spec", JSON.stringify(spec(report, name)));
    el._voda_chart = null;
    el.removeAttribute("data-drawn");
    window.vodaCharts.draw(el);
    applyPicks();
    var facts = document.getElementById("job-facts");
    var job = report.jobs[name];
    facts.textContent = report.algorithms.map(function (a, i) {
      var run = job.runs[i];
      var jct = run && run[2] !== null ? Math.round(run[2] - job.submit) + " s" : "unfinished";
      return a + ": " + jct;
    }).join(" · ");
  }

  // ----- the algorithm picker --------------------------------------------------------
  function shown() {
    var out = {};
    document.querySelectorAll("#algorithm-picker input[type=checkbox]").forEach(function (box) {
      out[box.value] = box.checked;
    });
    return out;
  }

  function applyPicks() {
    var picks = shown();
    document.querySelectorAll("[data-chart], #job-chart").forEach(function (el) {
      var chart = el._voda_chart;
      if (!chart) return;
      chart.series.forEach(function (s, i) {
        if (i === 0 || !(s.label in picks)) return;
        if (s.show !== picks[s.label]) chart.setSeries(i, {show: picks[s.label]});
      });
    });
    document.querySelectorAll("tr[data-algorithm]").forEach(function (row) {
      var name = row.getAttribute("data-algorithm");
      row.classList.toggle("hidden-algorithm", picks[name] === false);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var picker = document.getElementById("algorithm-picker");
    if (picker) {
      picker.addEventListener("change", applyPicks);
      picker.querySelectorAll("button[data-pick]").forEach(function (button) {
        button.addEventListener("click", function () {
          var on = button.getAttribute("data-pick") === "all";
          picker.querySelectorAll("input[type=checkbox]").forEach(function (box) {
            box.checked = on;
          });
          applyPicks();
        });
      });
    }
    var select = document.getElementById("job-select");
    if (!select) return;
    select.addEventListener("change", function () { show(select.value); });
    if (select.value) show(select.value);
  });
})();
