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

// The browser's time zone, for the server to show dates and the timeline's hours in it.
(function () {
  let tz = "";
  try { tz = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return; }
  if (!/^[A-Za-z0-9_+\-\/]{1,64}$/.test(tz)) return;
  const now = (document.cookie.match(/(?:^|;\s*)jobctl_tz=([^;]*)/) || [])[1];
  if (now === tz) return;
  document.cookie = "jobctl_tz=" + tz + "; path=/; max-age=31536000; SameSite=Strict";
  const set = (document.cookie.match(/(?:^|;\s*)jobctl_tz=([^;]*)/) || [])[1];
  // shown once in the server's zone: shown again in ours (only when the cookie took)
  if (set === tz && document.querySelector("[data-refresh], time")) window.location.reload();
})();

// Parts of a page marked data-refresh are read again every 5 s and replaced in place,
// without a full reload; the page works the same without this script.
(function () {
  const PERIOD_MS = 5000;
  if (!document.querySelector("[data-refresh][id]")) return;
  let busy = false;
  let stopped = false;
  async function refresh() {
    if (busy || stopped || document.visibilityState !== "visible") return;
    const active = document.activeElement;
    if (active && active.closest && active.closest("[data-refresh] form")) return;
    busy = true;
    try {
      const r = await fetch(window.location.href, {
        credentials: "same-origin", cache: "no-store", redirect: "manual",
        headers: {"Accept": "text/html"},
      });
      if (r.status === 401 || r.type === "opaqueredirect") { stopped = true; return; }
      if (!r.ok) return;
      const fresh = new DOMParser().parseFromString(await r.text(), "text/html");
      for (const old of document.querySelectorAll("[data-refresh][id]")) {
        const next = fresh.getElementById(old.id);
        if (next && next.innerHTML !== old.innerHTML) old.replaceWith(document.importNode(next, true));
      }
      document.documentElement.dataset.refreshed = String(Date.now());
    } catch (e) {
      // the server is away for a moment: try again at the next tick
    } finally {
      busy = false;
    }
  }
  window.setInterval(refresh, PERIOD_MS);
  document.addEventListener("visibilitychange", refresh);
})();
