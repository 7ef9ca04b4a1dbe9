// Live progress for a running assay: poll GET /v1/assays/{id} and update the bars; reload the
// page once the assay is decided so the server renders the evidence. No framework, no CDN.
(function () {
  "use strict";
  var box = document.getElementById("progress");
  if (!box) { return; }
  var assay = box.getAttribute("data-assay");
  var delay = 1000;
  var finished = { done: true, stopped: true, failed: true };

  function setBar(bar, done, planned) {
    if (!bar) { return; }
    var v = planned > 0 ? Math.min(1000, Math.round((1000 * done) / planned)) : 0;
    bar.value = v;
    bar.textContent = Math.round(v / 10) + "%";
  }

  function update(body) {
    var p = body.progress || {};
    document.getElementById("trials-done").textContent = p.trials_done;
    document.getElementById("trials-planned").textContent = p.trials_planned;
    document.getElementById("shards-done").textContent = p.shards_done;
    document.getElementById("runs-done").textContent = p.runs_done || 0;
    document.getElementById("gate-runs-done").textContent = p.gate_runs_done || 0;
    document.getElementById("slots-busy").textContent = p.slots_busy || 0;
    var waiting = p.waiting || {};
    var parts = Object.keys(waiting).sort().map(function (k) { return waiting[k] + " waiting for " + k; });
    document.getElementById("slots-waiting").textContent = parts.length ? ": " + parts.join(", ") : "";
    document.getElementById("status").textContent = body.status;
    setBar(document.getElementById("overall-progress"), p.trials_done, p.trials_planned);
    (body.faults || []).forEach(function (f) {
      var rows = document.querySelectorAll("#fault-progress tr[data-fault]");
      for (var i = 0; i < rows.length; i++) {
        if (rows[i].getAttribute("data-fault") === (f.id || "")) {
          rows[i].querySelector(".fdone").textContent = f.progress.trials_done;
          setBar(rows[i].querySelector("progress"), f.progress.trials_done, f.progress.trials_planned);
        }
      }
    });
    box.setAttribute("data-status", body.status);
    return finished[body.status] === true;
  }

  function poll() {
    fetch("/v1/assays/" + encodeURIComponent(assay), { headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.json(); })
      .then(function (body) {
        if (update(body)) { window.location.reload(); return; }
        delay = 1000;
        window.setTimeout(poll, delay);
      })
      .catch(function () {
        delay = Math.min(10000, delay * 2);
        window.setTimeout(poll, delay);
      });
  }
  window.setTimeout(poll, 500);
})();
