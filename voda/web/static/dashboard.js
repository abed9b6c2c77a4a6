/* The dashboard's own script: the live indicator of the server-sent event stream, the banner
 * when that stream is lost, what a live update must not undo (focus, open details, the
 * highlighted job), and the cluster map's highlight of a job's cells. */
(function () {
  "use strict";
  var CHECK_MS = 1500;      // how often a page whose stream was lost asks the service
  var GRACE_MS = 700;       // an error the stream recovers from at once is not shown
  var connected = false, lost = false, leaving = false, checking = null;

  function dot(on) {
    var el = document.getElementById("live-dot");
    if (!el) return;
    el.classList.toggle("on", on);
    el.title = on ? "live: updates are pushed by the server" : "not connected";
  }

  // ----- the connection banner -------------------------------------------------------------
  function say(text, link) {
    var el = document.getElementById("connection");
    if (!el) return;
    el.textContent = "";
    if (!text) return;
    el.appendChild(document.createTextNode(text));
    if (link) {
      var a = document.createElement("a");
      a.href = link.href;
      a.id = "connection-login";
      a.textContent = link.text;
      el.appendChild(document.createTextNode(" "));
      el.appendChild(a);
    }
  }

  function stopChecking() {
    if (checking) window.clearTimeout(checking);
    checking = null;
  }

  function check() {
    // Is the service there, and does it still know this login? (204, or 401: it restarted
    // and its sessions are gone, or the user logged out elsewhere.)
    checking = null;
    window.fetch("/ui/session", {cache: "no-store", credentials: "same-origin"})
      .then(function (answer) {
        if (!lost) return;
        if (answer.status === 401) {
          var next = window.location.pathname + window.location.search;
          say("Your session has ended (the service restarted, or you logged out).",
              {href: "/ui/login?next=" + encodeURIComponent(next), text: "Log in again"});
          return;
        }
        if (answer.ok) {  // back: the stream reconnects by itself
          lost = false;
          say("");
          return;
        }
        checking = window.setTimeout(check, CHECK_MS);
      })
      .catch(function () {
        if (lost) checking = window.setTimeout(check, CHECK_MS);
      });
  }

  document.addEventListener("htmx:sseOpen", function () {
    connected = true;
    dot(true);
    if (lost) {
      lost = false;
      stopChecking();
      say("");
    }
  });
  document.addEventListener("htmx:sseError", function () {
    connected = false;
    dot(false);
    window.setTimeout(function () {
      if (connected || lost || leaving) return;
      lost = true;
      say("Connection lost — retrying…");
      check();
    }, GRACE_MS);
  });
  document.addEventListener("htmx:sseClose", function (e) {
    // The service ended the stream on purpose (the page's job is gone): nothing more will
    // come, and nothing was lost.
    if (!e.detail || e.detail.type !== "message") return;
    connected = false;
    dot(false);
    var el = document.getElementById("live-dot");
    if (el) {
      el.classList.add("ended");
      el.title = "ended: nothing more to show";
    }
  });
  window.addEventListener("pagehide", function () { leaving = true; });
  window.addEventListener("beforeunload", function () { leaving = true; });

  // ----- live updates keep what the reader was doing -----------------------------------------
  // A page part refreshed on a timer (data-refresh: the History and Queues charts) keeps
  // them too.
  var kept = null;
  function keep(part) {
    var active = document.activeElement;
    kept = {
      focus: active && active.id && part.contains(active) ? active.id : null,
      open: Array.prototype.map.call(part.querySelectorAll("details[open][id]"),
                                     function (d) { return d.id; }),
    };
  }
  function restore() {
    if (!kept) return;
    kept.open.forEach(function (id) {
      var d = document.getElementById(id);
      if (d) d.open = true;
    });
    if (kept.focus) {
      var el = document.getElementById(kept.focus);
      if (el) el.focus({preventScroll: true});
    }
    kept = null;
  }
  document.addEventListener("htmx:sseBeforeMessage", function (e) { keep(e.target); });
  document.addEventListener("htmx:sseMessage", function () {
    dot(true);
    var stamp = document.getElementById("updated");
    if (stamp) stamp.textContent = new Date().toLocaleTimeString();
    restore();
    highlight(current);
  });
  document.addEventListener("htmx:beforeSwap", function (e) {
    var target = e.detail && e.detail.target;
    if (target && target.hasAttribute && target.hasAttribute("data-refresh")) keep(target);
  });
  // Restored in the swap's own task, so the new part never shows its details closed (the
  // settle comes a tick later).
  document.addEventListener("htmx:afterSwap", function () { restore(); });

  // ----- an action's confirmation (voda.api.ui.actions) ---------------------------------------
  // Cancel clears the dialog and gives the focus back to the page's actions; a dialog
  // that appears takes the focus on its Cancel (the safe answer).
  document.addEventListener("click", function (e) {
    var button = e.target.closest ? e.target.closest("[data-dismiss]") : null;
    if (!button) return;
    var dialog = button.closest(".action-dialog");
    if (dialog) dialog.textContent = "";
    var back = document.querySelector(".actions button, .actions select");
    if (back) back.focus();
  });
  document.addEventListener("htmx:afterSwap", function (e) {
    var target = e.detail && e.detail.target;
    if (!target || !target.classList || !target.classList.contains("action-dialog")) return;
    var focus = target.querySelector("#confirm-no") || target.querySelector("[role=status]");
    if (focus) focus.focus();
  });

  // ----- the cluster map: all of a job's cells at once -------------------------------------
  var current = null;
  var JOB_PARTS = "#topology [data-job], #legend [data-job]";

  function highlight(job) {
    current = job;
    var parts = document.querySelectorAll(JOB_PARTS);
    for (var i = 0; i < parts.length; i++) {
      parts[i].classList.toggle("hl", job !== null && parts[i].getAttribute("data-job") === job);
    }
    ["topology", "legend"].forEach(function (id) {
      var el = document.getElementById(id);
      if (el) el.classList.toggle("highlighting", job !== null);
    });
  }

  function jobOf(target) {
    var el = target && target.closest ? target.closest(JOB_PARTS) : null;
    return el ? el.getAttribute("data-job") : null;
  }

  document.addEventListener("mouseover", function (e) {
    var job = jobOf(e.target);
    if (job !== current) highlight(job);
  });
  document.addEventListener("focusin", function (e) {
    var job = jobOf(e.target);
    if (job !== current) highlight(job);
  });
  document.addEventListener("focusout", function (e) {
    if (!jobOf(e.relatedTarget) && jobOf(e.target) === current) highlight(null);
  });
})();
