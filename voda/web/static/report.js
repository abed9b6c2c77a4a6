/* The simulation report's per-job timeline: the chosen job's GPUs over time under every
 * algorithm, drawn when a job is picked from the list. */
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
      return {label: report.algorithms[i], values: values, step: true};
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
    var facts = document.getElementById("job-facts");
    var job = report.jobs[name];
    facts.textContent = report.algorithms.map(function (a, i) {
      var run = job.runs[i];
      var jct = run && run[2] !== null ? Math.round(run[2] - job.submit) + " s" : "unfinished";
      return a + ": " + jct;
    }).join(" · ");
  }

  document.addEventListener("DOMContentLoaded", function () {
    var select = document.getElementById("job-select");
    if (!select) return;
    select.addEventListener("change", function () { show(select.value); });
    if (select.value) show(select.value);
  });
})();
