// The assistant panel: connects this tab to the gateway with the task's tab token and
// applies the agent's UI actions with the page's own handlers. Every value the agent
// sends is shown with textContent; views are reached through the path table in nav.js.
import { currentView, followRun, navigate, onViewChange, pathOf } from "./nav.js";

const LOG_KEY = "assistant.log";
const OPEN_KEY = "assistant.open";
const TAB_KEY = "assistant.tab";
// After these, the task is gone or its token is: the next open asks for a fresh task.
const FINAL = new Set(["task_ended", "token_expired"]);

// This browser tab's key for the dashboard backend: each tab gets its own task.
function tabKey() {
  let key = sessionStorage.getItem(TAB_KEY);
  if (!key) {
    const bytes = crypto.getRandomValues(new Uint8Array(12));
    key = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    sessionStorage.setItem(TAB_KEY, key);
  }
  return key;
}
const MAX_LOG = 60;

function $(panel, selector) {
  return panel.querySelector(selector);
}

function loadLog() {
  try {
    const entries = JSON.parse(sessionStorage.getItem(LOG_KEY) || "[]");
    return Array.isArray(entries) ? entries.slice(-MAX_LOG) : [];
  } catch {
    return [];
  }
}

// One line a person can read for each action and its result (the full data stays in the
// gateway's evidence).
const SUMMARY = {
  open_view: (a) => [a.view, ...Object.values(a.params || {})].join(" "),
  populate_draft: (a) => `${a.agent_id || "new agent"}: ${Object.keys(a.fields || {}).join(", ")}`,
  show_run_progress: (a) => a.run_id,
  display_proposed_change: (a) => a.title,
  read_view: () => "",
};
const RESULT = {
  open_view: (r) => `opened ${r.view}`,
  populate_draft: (r) => `builder filled (${(r.applied || []).join(", ")})`,
  show_run_progress: () => "progress shown in this panel",
  display_proposed_change: () => "shown above",
  read_view: (r) => `view ${r.view}, revision ${r.revision}`,
};

function summary(table, action, value) {
  try {
    return short(table[action] ? table[action](value || {}) : value);
  } catch {
    return short(value);
  }
}

function short(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value ?? {});
  return text.length > 160 ? `${text.slice(0, 157)}...` : text;
}

export function startAssistant(panel, gatewayUrl) {
  const status = $(panel, '[data-testid="assistant-status"]');
  const openButton = $(panel, '[data-testid="assistant-open"]');
  const taskLine = $(panel, '[data-testid="assistant-task"]');
  const logList = $(panel, '[data-testid="assistant-log"]');
  const progress = $(panel, '[data-testid="assistant-progress"]');
  const proposal = $(panel, '[data-testid="assistant-proposal"]');
  let entries = loadLog();
  let session = null;
  let opening = null;
  let renew = false;

  function setStatus(text) {
    status.textContent = text;
    panel.dataset.state = text;
  }

  function renderEntry(entry) {
    const item = document.createElement("li");
    item.dataset.action = entry.action;
    item.dataset.outcome = entry.outcome;
    const head = document.createElement("strong");
    head.textContent = entry.action;
    const args = document.createElement("span");
    args.className = "args";
    args.textContent = ` ${entry.args}`;
    const result = document.createElement("div");
    result.className = `outcome outcome-${entry.outcome}`;
    result.textContent = entry.outcome === "pending" ? "..." : `${entry.outcome}: ${entry.result}`;
    item.append(head, args, result);
    return item;
  }

  function renderLog() {
    logList.replaceChildren(...entries.map(renderEntry));
  }

  function record(entry) {
    entries = [...entries, entry].slice(-MAX_LOG);
    sessionStorage.setItem(LOG_KEY, JSON.stringify(entries));
    renderLog();
  }

  // Each handler is logged as the action arrives and again with its result.
  function logged(action, handler) {
    return async (args = {}) => {
      const entry = { action, args: summary(SUMMARY, action, args), outcome: "pending", result: "" };
      record(entry);
      try {
        const result = await handler(args);
        entry.outcome = "ok";
        entry.result = summary(RESULT, action, result);
        return result;
      } catch (error) {
        entry.outcome = "error";
        entry.result = short(error && error.message);
        throw error;
      } finally {
        sessionStorage.setItem(LOG_KEY, JSON.stringify(entries));
        renderLog();
      }
    };
  }

  function showProgress(runId) {
    let box = progress.querySelector(`[data-run-id="${CSS.escape(runId)}"]`);
    if (box) return box;
    box = document.createElement("div");
    box.className = "run-progress";
    box.dataset.runId = runId;
    box.dataset.testid = "run-progress";
    const title = document.createElement("div");
    title.className = "run-title";
    title.textContent = `Run ${runId}`;
    const state = document.createElement("div");
    state.className = "run-state";
    state.textContent = "queued";
    const bar = document.createElement("progress");
    bar.max = 1;
    bar.value = 0;
    const list = document.createElement("ul");
    box.append(title, state, bar, list);
    progress.prepend(box);
    followRun(
      runId,
      (run, code) => {
        if (!run) {
          state.textContent = `unavailable (${code})`;
          return;
        }
        const done = run.scenarios.filter((s) => !["pending", "running"].includes(s.state));
        state.textContent = run.terminal ? `${run.state} (terminal)` : run.state;
        box.dataset.state = run.state;
        bar.max = run.scenarios.length || 1;
        bar.value = done.length;
        list.replaceChildren(
          ...run.scenarios.map((s) => {
            const li = document.createElement("li");
            li.dataset.state = s.state;
            li.textContent = `${s.name}: ${s.state}${s.reason ? ` (${s.reason})` : ""}`;
            return li;
          }),
        );
      },
      () => box.isConnected,
    );
    return box;
  }

  async function goTo(view, params) {
    const outcome = await navigate(pathOf(view, params));
    if (!outcome.applied) throw new Error("the view could not be opened");
    return currentView();
  }

  const actions = {
    open_view: logged("open_view", async ({ view, params }) => {
      const shown = await goTo(view, params || {});
      return { view: shown.view, params: shown.params };
    }),
    populate_draft: logged("populate_draft", async ({ agent_id, fields }) => {
      const here = currentView();
      const onBuilder =
        here.view === "agent_builder" && (here.params.agent_id || null) === (agent_id || null);
      if (!onBuilder) await goTo("agent_builder", agent_id ? { agent_id } : {});
      const form = document.querySelector('[data-testid="builder-form"]');
      if (!form) throw new Error("the builder is not open");
      const applied = [];
      if (fields.name != null) {
        form.elements.name.value = fields.name;
        applied.push("name");
      }
      if (fields.instructions != null) {
        form.elements.instructions.value = fields.instructions;
        applied.push("instructions");
      }
      if (fields.model != null) {
        const select = form.elements.model;
        if (![...select.options].some((o) => o.value === fields.model)) {
          throw new Error(`unknown model ${String(fields.model).slice(0, 64)}`);
        }
        select.value = fields.model;
        applied.push("model");
      }
      if (Array.isArray(fields.tools)) {
        for (const box of form.querySelectorAll('input[name="tools"]')) {
          box.checked = fields.tools.includes(box.value);
        }
        applied.push("tools");
      }
      const note = document.querySelector('[data-testid="populated-note"]');
      if (note) note.hidden = false;
      return { agent_id: agent_id || null, applied, view: "agent_builder" };
    }),
    show_run_progress: logged("show_run_progress", async ({ run_id }) => {
      showProgress(run_id);
      return { run_id, shown: true };
    }),
    display_proposed_change: logged("display_proposed_change", async (change) => {
      $(proposal, ".proposal-title").textContent = change.title;
      $(proposal, ".proposal-summary").textContent = change.summary || "";
      $(proposal, ".proposal-diff").textContent = change.diff || "";
      proposal.hidden = false;
      return { shown: true };
    }),
  };

  // The shim answers read_view itself; it is logged from the session's events.
  function watch(opened) {
    const reads = new Map();
    opened.addEventListener("request", (event) => {
      if ((event.detail.action ?? event.detail.type) !== "read_view") return;
      const entry = { action: "read_view", args: "", outcome: "pending", result: "" };
      reads.set(event.detail.id, entry);
      record(entry);
    });
    opened.addEventListener("applied", (event) => {
      const entry = reads.get(event.detail.id);
      if (!entry) return;
      reads.delete(event.detail.id);
      entry.outcome = "ok";
      entry.result = summary(RESULT, "read_view", event.detail.result);
      sessionStorage.setItem(LOG_KEY, JSON.stringify(entries));
      renderLog();
    });
    opened.addEventListener("disconnect", () => {
      if (!opened.closed) setStatus("reconnecting");
    });
    opened.addEventListener("welcome", () => setStatus("connected"));
    opened.addEventListener("closed", (event) => {
      if (session === opened) session = null;
      // Leaving the page is not a loss of the assistant: the next page reconnects.
      if (event.detail.reason === "pagehide") return;
      if (FINAL.has(event.detail.reason)) renew = true;
      setStatus("disconnected");
      openButton.hidden = false;
      openButton.disabled = false;
      openButton.textContent = "Reconnect assistant";
      record({ action: "channel", args: "closed", outcome: "info", result: short(event.detail.reason) });
    });
  }

  // The dashboard's backend hands out the task (its control plane made it); a test suite
  // that made the task itself hands it over instead (`handed`: {gateway, token, task?}).
  async function grantFromBackend() {
    const response = await fetch("/api/assistant/session", {
      method: "POST",
      credentials: "same-origin",
      headers: { accept: "application/json", "content-type": "application/json" },
      body: JSON.stringify({ tab: tabKey(), renew }),
    });
    if (!response.ok) throw new Error(`the dashboard refused (${response.status})`);
    return response.json();
  }

  async function open(handed) {
    if (session) return session;
    if (opening) return opening;
    opening = (async () => {
      setStatus("connecting");
      openButton.disabled = true;
      try {
        const grant = handed ? { tab_token: handed.token, task_id: handed.task } : await grantFromBackend();
        const shim = await import(`${gatewayUrl}/webmcp.js`);
        const opened = await shim.connectGateway({
          gateway: gatewayUrl,
          token: grant.tab_token,
          // The task's id routes the channel to the cluster node that holds the task.
          task: grant.task_id,
          actions,
          view: () => currentView(),
          webmcp: true,
          // What the assistant asks the user to approve shows in the panel itself.
          approvalContainer: document.getElementById("assistant-approvals"),
        });
        watch(opened);
        session = opened;
        renew = false;
        taskLine.textContent = `Task ${opened.taskId}`;
        taskLine.dataset.taskId = opened.taskId;
        taskLine.hidden = false;
        // A handed task is the test's to reconnect; the backend's is reopened on reload.
        if (!handed) sessionStorage.setItem(OPEN_KEY, "1");
        openButton.hidden = true;
        setStatus("connected");
        return session;
      } catch (error) {
        setStatus("error");
        openButton.disabled = false;
        record({ action: "connect", args: "", outcome: "error", result: short(error.message) });
        throw error;
      } finally {
        opening = null;
      }
    })();
    return opening;
  }

  onViewChange((view) => {
    if (session) session.state(view);
  });
  openButton.addEventListener("click", () => open().catch(() => {}));
  renderLog();
  // The panel was open before a full reload: reconnect (same tab id, kept by the shim).
  if (sessionStorage.getItem(OPEN_KEY) === "1") open().catch(() => {});
  // For the page's own tests and the demo: whether the panel is connected, and to open it.
  // The handoff hook of the gateway's pytest plugin: connect with a task made by the test.
  window.gatewayConnect = async (handoff) => {
    if (handoff.gateway !== gatewayUrl) throw new Error("this dashboard talks to " + gatewayUrl);
    const opened = await open({ token: handoff.token, task: handoff.task });
    return { task_id: opened.taskId, tab_id: opened.tabId };
  };
  window.syntheticAssistant = {
    open,
    get session() {
      return session;
    },
  };
}
