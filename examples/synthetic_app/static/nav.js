// In-place navigation of the dashboard: swap <main> without reloading the page, so the
// assistant panel beside it keeps its connection. Server pages are parsed with DOMParser
// (which never runs their scripts) and adopted as nodes: no HTML string is ever assigned.

const ID = /^[a-z]+_[0-9a-f]+$/;

function id(value) {
  if (typeof value !== "string" || !ID.test(value)) throw new Error("invalid id");
  return value;
}

// The view -> path table, mirroring views.py. Agent output names a view and its params;
// it never becomes a URL by itself.
const PATHS = {
  agents: () => "/agents",
  agent_builder: (p) => (p.agent_id ? `/agents/${id(p.agent_id)}` : "/agents/new"),
  suites: () => "/suites",
  suite: (p) => `/suites/${id(p.suite_id)}`,
  runs: () => "/runs",
  run: (p) => `/runs/${id(p.run_id)}`,
  report: (p) => `/reports/${id(p.run_id)}`,
};

export function pathOf(view, params = {}) {
  if (!Object.hasOwn(PATHS, view)) throw new Error(`unknown view: ${String(view).slice(0, 64)}`);
  return PATHS[view](params || {});
}

function parseJson(text, fallback = {}) {
  try {
    return JSON.parse(text || "");
  } catch {
    return fallback;
  }
}

export function currentView() {
  const main = document.getElementById("view");
  return {
    view: main.dataset.view,
    params: parseJson(main.dataset.params),
    selection: parseJson(main.dataset.selection),
    available_actions: parseJson(main.dataset.actions, []),
  };
}

const listeners = new Set();
export function onViewChange(fn) {
  listeners.add(fn);
}

let sequence = 0;

async function swapTo(response, seq, push) {
  const text = await response.text();
  if (seq !== sequence) return { applied: false }; // a later navigation won
  const doc = new DOMParser().parseFromString(text, "text/html");
  const next = doc.getElementById("view");
  const samePanel = !!doc.getElementById("assistant") === !!document.getElementById("assistant");
  if (!next || !samePanel) {
    // Signed out, or another kind of page: let the browser load it as a whole.
    location.assign(response.url);
    return { applied: false };
  }
  document.getElementById("view").replaceWith(document.adoptNode(next));
  document.title = doc.title;
  if (push && response.url !== location.href) history.pushState({}, "", response.url);
  wire();
  const view = currentView();
  for (const fn of listeners) fn(view);
  return { applied: true, status: response.status, view };
}

export async function navigate(path, { push = true } = {}) {
  const seq = ++sequence;
  const response = await fetch(path, { credentials: "same-origin", headers: { accept: "text/html" } });
  return swapTo(response, seq, push);
}

async function submit(form) {
  const seq = ++sequence;
  const response = await fetch(form.action, {
    method: "POST",
    credentials: "same-origin",
    body: new URLSearchParams(new FormData(form)),
  });
  return swapTo(response, seq, true);
}

// -- live run tables -----------------------------------------------------------------------

function renderScenarioRow(row, s) {
  row.dataset.state = s.state;
  const cells = row.querySelectorAll("td");
  cells[1].textContent = s.state;
  cells[1].className = `state-${s.state}`;
  cells[2].textContent = s.reason || "";
  cells[3].textContent = s.detail || "";
}

export async function followRun(runId, onUpdate, isLive) {
  let since = "";
  while (isLive()) {
    const response = await fetch(
      `/api/runs/${id(runId)}?wait=5&since=${encodeURIComponent(since)}`,
      { credentials: "same-origin" },
    );
    if (!response.ok) {
      onUpdate(null, response.status);
      return null;
    }
    const run = await response.json();
    since = run.fingerprint;
    onUpdate(run, response.status);
    if (run.terminal) return run;
  }
  return null;
}

function wireLiveRun(main) {
  const table = main.querySelector("[data-live-run]");
  if (!table) return;
  const state = main.querySelector('[data-testid="run-state"]');
  if (state && ["completed", "failed"].includes(state.textContent)) return;
  followRun(
    table.dataset.liveRun,
    (run) => {
      if (!run || !main.isConnected) return;
      state.textContent = run.state;
      state.className = `state-${run.state}`;
      for (const s of run.scenarios) {
        const row = table.querySelector(`tr[data-scenario-id="${CSS.escape(s.scenario_id)}"]`);
        if (row) renderScenarioRow(row, s);
      }
    },
    () => main.isConnected,
  ).then((run) => {
    // Re-render the finished run (report link) only if the user is still looking at it.
    if (run && main.isConnected) navigate(location.pathname, { push: false });
  });
}

function wire() {
  wireLiveRun(document.getElementById("view"));
}

export function startNavigation() {
  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-nav]");
    if (!link || event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const url = new URL(link.href);
    if (url.origin !== location.origin) return;
    event.preventDefault();
    navigate(url.pathname);
  });
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!form.matches("form[data-nav-form]")) return;
    event.preventDefault();
    submit(form);
  });
  window.addEventListener("popstate", () => navigate(location.pathname, { push: false }));
  wire();
}
