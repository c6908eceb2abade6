// The console's live parts: counts that follow the tasks, a timeline that grows at its
// end, and approval cards whose buttons take an answer only once the card has been in
// view and still for a moment. Every fragment inserted here was rendered (and escaped) by
// the server; this script never builds markup from a task's data.

const POLL_MS = 1500;
// How long an approval card must stay fully in view and unmoved before it takes an answer.
const ARM_MS = 800;
const CHECK_MS = 100;

const csrf = document.querySelector('meta[name="console-csrf"]')?.content ?? "";

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
  if (response.status === 401) {
    window.location.assign("/console/sign-in");
    throw new Error("signed out");
  }
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

function every(ms, work) {
  let busy = false;
  const tick = async () => {
    if (busy || document.hidden) return;
    busy = true;
    try { await work(); } catch (err) { console.warn(err); } finally { busy = false; }
  };
  setInterval(tick, ms);
}

function fragment(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content;
}

// -- the list of tasks ------------------------------------------------------------------

function followTasks() {
  const table = document.querySelector('[data-testid="tasks"]');
  const note = document.querySelector('[data-testid="live-note"]');
  if (!table) return;
  const query = table.dataset.query;
  every(POLL_MS, async () => {
    const { tasks } = await getJSON(`/console/api/tasks${query ? `?${query}` : ""}`);
    let unseen = 0;
    for (const task of tasks) {
      const row = table.querySelector(`tr[data-task-id="${CSS.escape(task.task_id)}"]`);
      if (!row) { unseen += 1; continue; }
      row.dataset.status = task.status;
      const status = row.querySelector('[data-field="status"]');
      if (status.textContent !== task.status) {
        status.textContent = task.status;
        status.className = `status s-${task.status}`;
      }
      for (const [name, value] of Object.entries(task.tally)) {
        const cell = row.querySelector(`[data-count="${name}"]`);
        if (cell && cell.textContent !== String(value)) cell.textContent = String(value);
      }
    }
    // New tasks are announced, not inserted: the rows a person is reading stay put.
    if (unseen) {
      note.hidden = false;
      note.textContent = `${unseen} new task(s) since this page loaded: reload to list them.`;
    }
  });
}

// -- approval cards ----------------------------------------------------------------------

function arm(card) {
  const fieldset = card.querySelector("fieldset.answer");
  if (!fieldset || fieldset.dataset.watched) return;
  fieldset.dataset.watched = "1";
  const hint = fieldset.querySelector(".arming");
  let visible = false;
  let last = null;
  let stillSince = 0;
  const observer = new IntersectionObserver((seen) => {
    for (const item of seen) visible = item.intersectionRatio >= 0.99;
  }, { threshold: [0, 0.5, 0.99, 1] });
  observer.observe(fieldset);
  const timer = setInterval(() => {
    if (card.dataset.state !== "pending") {
      clearInterval(timer);
      observer.disconnect();
      fieldset.disabled = true;
      return;
    }
    const box = card.getBoundingClientRect();
    const here = `${box.left},${box.top},${box.width},${box.height}`;
    const now = performance.now();
    if (!visible || here !== last) {
      // Out of view or moved: no answer until it has been still again for a while.
      last = here;
      stillSince = now;
      if (!fieldset.disabled) {
        fieldset.disabled = true;
        hint.textContent = "The card moved or left the view: the buttons wait until it is still.";
      }
      return;
    }
    if (fieldset.disabled && now - stillSince >= ARM_MS) {
      fieldset.disabled = false;
      hint.textContent = "Ready: the answer goes to the task at once.";
    }
  }, CHECK_MS);
  fieldset.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-decision]");
    if (!button || !event.isTrusted || fieldset.disabled) return;
    const scope = fieldset.querySelector('input[type="radio"]:checked')?.value ?? "call";
    fieldset.disabled = true;
    hint.textContent = "Sending…";
    const task = card.closest("[data-task-id]").dataset.taskId;
    const response = await fetch(
      `/console/api/tasks/${encodeURIComponent(task)}/approvals/${encodeURIComponent(card.dataset.approvalId)}`,
      {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json", "x-console-csrf": csrf },
        body: JSON.stringify({ decision: button.dataset.decision, scope }),
      },
    );
    const answer = await response.json().catch(() => ({}));
    if (response.ok) {
      settle(card, answer.status, `${answer.status} by ${answer.decision?.approver?.id ?? ""} through control`);
    } else {
      // One answer counts: a second one (or one too late) is told why, nothing changes.
      hint.textContent = answer.error?.message ?? `refused (${response.status})`;
      card.dataset.refused = answer.error?.code ?? String(response.status);
    }
  });
}

function settle(card, status, outcome) {
  card.dataset.state = status;
  const label = card.querySelector('[data-field="outcome"]');
  if (label) {
    label.textContent = outcome;
    label.className = `status s-${status}`;
  }
  const fieldset = card.querySelector("fieldset.answer");
  if (fieldset) {
    fieldset.disabled = true;
    // Hidden, not removed: the cards below keep their place.
    fieldset.classList.add("settled");
    fieldset.querySelector(".arming").textContent = `Answered: ${outcome}.`;
  }
}

// -- a task's page -------------------------------------------------------------------------

function followTask() {
  const article = document.querySelector("article.task");
  if (!article) return;
  const list = article.querySelector('[data-testid="timeline"]');
  const approvals = article.querySelector('[data-testid="approvals"]');
  for (const card of approvals.querySelectorAll(".approval")) arm(card);
  const task = article.dataset.taskId;
  every(POLL_MS, async () => {
    const live = await getJSON(
      `/console/api/tasks/${encodeURIComponent(task)}/live?after=${article.dataset.lastSeq}`,
    );
    // An older page of the timeline stays as it is: new records go on the newest one.
    if (live.entries_html && article.dataset.follow === "true") {
      list.append(fragment(live.entries_html));
    }
    article.dataset.lastSeq = String(live.last_seq);
    const status = article.querySelector('[data-testid="task-status"]');
    if (status.textContent !== live.status) {
      status.textContent = live.status;
      status.className = `status s-${live.status}`;
    }
    for (const [name, value] of Object.entries(live.metrics)) {
      const cell = article.querySelector(`[data-metric="${name}"]`);
      if (cell && cell.textContent !== String(value)) cell.textContent = String(value);
    }
    for (const approval of live.approvals) {
      const card = approvals.querySelector(`[data-approval-id="${CSS.escape(approval.approval_id)}"]`);
      if (!card) {
        // A new request goes after the others, so none of them moves.
        approvals.querySelector("[data-empty]")?.remove();
        const added = fragment(approval.html).firstElementChild;
        approvals.append(added);
        arm(added);
      } else if (card.dataset.state !== approval.status) {
        const outcome = fragment(approval.html).querySelector('[data-field="outcome"]')?.textContent ?? approval.status;
        settle(card, approval.status, outcome);
      }
    }
  });
}

// -- one approval's page (where a link given to an agent's client leads) ------------------

function followApproval() {
  const article = document.querySelector("article.approval-page");
  if (!article) return;
  for (const card of article.querySelectorAll(".approval")) arm(card);
}

followTasks();
followTask();
followApproval();
