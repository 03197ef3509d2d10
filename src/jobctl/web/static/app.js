// jobctl dashboard: follows a running attempt's output live (server-sent events).
"use strict";
(function () {
  const out = document.getElementById("output");
  if (!out || !out.dataset.events) return;
  const stateEl = document.getElementById("run-state");
  const attemptEl = document.getElementById("output-attempt");
  const live = document.getElementById("live");
  const first = JSON.stringify([stateEl ? stateEl.textContent : "", out.textContent]);
  let changed = false;
  const events = new EventSource(out.dataset.events);
  events.addEventListener("output", function (e) {
    const d = JSON.parse(e.data);
    if (d.state === "gone") return;
    const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    out.textContent = d.output;  // text, never HTML
    if (atBottom) out.scrollTop = out.scrollHeight;
    if (stateEl) {
      stateEl.textContent = d.state;
      stateEl.className = "state s-" + d.state;
    }
    if (attemptEl && d.attempt) attemptEl.textContent = String(d.attempt);
    if (JSON.stringify([d.state, d.output]) !== first) changed = true;
  });
  events.addEventListener("end", function () {
    events.close();
    if (live) live.textContent = "the run has ended";
    // the final page shows every attempt with its end, exit code and error
    if (changed) window.location.reload();
  });
})();
