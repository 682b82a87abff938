// The live view: poll /api/view and swap in each section whose server-rendered (escaped) HTML
// changed; with admin.ui.write.enable, the reset and delete buttons POST with the write header.
"use strict";
(function () {
  const POLL_MS = 1000;
  const shown = {};
  const updated = document.getElementById("updated");

  function render(sections) {
    for (const id of Object.keys(sections)) {
      const el = document.getElementById(id);
      if (el && shown[id] !== sections[id]) {
        el.innerHTML = sections[id];
        shown[id] = sections[id];
      }
    }
  }

  async function poll() {
    try {
      const resp = await fetch("/api/view", {cache: "no-store"});
      if (resp.ok) {
        const data = await resp.json();
        render(data.sections);
        updated.textContent = "updated " + new Date(data.now_ms).toLocaleTimeString();
        updated.classList.remove("stale");
      } else {
        updated.textContent = "broker answered " + resp.status;
        updated.classList.add("stale");
      }
    } catch (err) {
      updated.textContent = "broker unreachable";
      updated.classList.add("stale");
    }
    setTimeout(poll, POLL_MS);
  }

  document.addEventListener("click", async function (event) {
    const button = event.target.closest("button.act");
    if (!button || document.body.dataset.write !== "true") {
      return;
    }
    const group = button.dataset.group;
    const action = button.dataset.action;
    const kind = action === "reset" ? "share" : button.dataset.kind;
    const what = action === "reset" ? "reset " + group + " to " + button.dataset.to : "delete " + group;
    if (!window.confirm(what + "?")) {
      return;
    }
    let url = "/api/groups/" + kind + "/" + encodeURIComponent(group) + "/" + action;
    if (action === "reset") {
      url += "?to=" + encodeURIComponent(button.dataset.to);
    }
    const resp = await fetch(url, {method: "POST", headers: {"X-Sharebroker-Write": "1"}});
    const body = await resp.json();
    updated.textContent = what + ": " + body.error + (body.message ? " (" + body.message + ")" : "");
  });

  for (const el of document.querySelectorAll(".live")) {
    shown[el.id] = el.innerHTML;
  }
  setTimeout(poll, POLL_MS);
})();
