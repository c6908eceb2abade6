// approval.js: the element in which the shim shows a person what the task waits for them
// to approve, and takes their answer.
//
// The element is the shim's own: a host element whose shadow root is closed, so neither the
// page's scripts nor a UI action can reach its buttons or draw into it; the page may restyle
// it through its parts (::part(panel), summary, details, actions, button, deny, approve,
// approve-task, note). Text only: every string is set with textContent. An answer counts
// only from a trusted user event (a real click or key press, not a script's click()); the
// nonce that makes it an answer stays in this module's closure, never in the DOM.
//
// A panel must not take a click meant for something else. Its buttons take no answer until
// it has been wholly in view, unoccluded (IntersectionObserver's visibility tracking where
// the browser has it) and unmoved for ARM_MS: one that just appeared, or moved, under a
// pointer already on its way stays inert, and says so. Panels never move once placed: in
// the default layout each takes a free slot of a column in the corner, above the ones
// already shown, and keeps it; one that finds no room waits, drawn nowhere, until a slot
// frees. A host that lays the panels out itself (through ::part(panel)) gets the same
// stillness rule. Before its buttons wake, a panel shows the tool, what it asks, its
// details and what each button approves.

import { RULES } from "./tab-rules.js";

const STYLE = `
  :host { all: initial; }
  [part~="panel"] {
    position: fixed; right: 16px; bottom: 16px; z-index: 2147483647; max-width: 420px;
    box-sizing: border-box; padding: 14px 16px; border-radius: 10px;
    background: #fff; color: #111; border: 1px solid #c7c7cc;
    box-shadow: 0 2px 6px rgba(0, 0, 0, 0.2);
    font: 14px/1.4 system-ui, sans-serif;
  }
  [part~="title"] { font-weight: 600; margin: 0 0 6px; }
  [part~="summary"] { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0 0 8px; }
  [part~="details"] { margin: 0 0 10px; padding: 0; list-style: none; color: #444; font-size: 13px; }
  [part~="actions"] { display: flex; gap: 8px; flex-wrap: wrap; }
  [part~="button"] {
    font: inherit; padding: 6px 12px; border-radius: 6px; border: 1px solid #888;
    background: #f4f4f5; color: #111; cursor: pointer;
  }
  [part~="approve"] { background: #0a5ad4; border-color: #0a5ad4; color: #fff; }
  [part~="note"] { margin: 8px 0 0; color: #555; font-size: 13px; }
  /* Two lines, whatever it says: a panel's size never changes once it is placed. */
  [part~="note"] { height: 2.8em; overflow: hidden; }
  [part~="scope"] { margin: 0 0 10px; color: #444; font-size: 13px; }
  [part~="panel"] { max-height: calc(100vh - 32px); overflow: auto; }
  [part~="button"]:disabled { opacity: 0.55; cursor: default; }
`;

const WAITING = "Waiting for someone else to decide.";
const NOT_YET = "Read what this approves; its buttons take an answer once it has held still.";
// How long a panel must have been in view, unoccluded and unmoved before it takes an
// answer (a browser's own permission prompts wait about as long), and how often that is
// looked at.
export const ARM_MS = 800;
const CHECK_MS = 100;
const EDGE_PX = 16;
// Wider than the panel's shadow reaches: a shadow over the next panel occludes it.
const GAP_PX = 16;

function taskScope(request) {
  return request.reason === RULES.approval.own_ask
    ? `For this task: ${request.tool} does not ask this again. Its other approvals still ask.`
    : `For this task: later calls of ${request.tool} run without asking.`;
}

function element(tag, part, text) {
  const node = document.createElement(tag);
  node.setAttribute("part", part);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

/**
 * The approvals a tab shows. `answer(request, decision, scope)` sends one answer and
 * returns whether it could be sent; `emit(type, detail)` tells the page what happened.
 */
export class ApprovalPanel {
  constructor({ container, answer, emit }) {
    this._container = container || null;
    this._answer = answer;
    this._emit = emit;
    this._shown = new Map(); // approval id -> what `show` drew, and its stillness
    this._timer = null;
  }

  /** Show an `approval_request` (again, after a reconnect: the newest showing wins). */
  show(request) {
    if (!globalThis.document || typeof request.id !== "string") return;
    this.close(request.id, null);
    const host = document.createElement("div");
    host.setAttribute("data-gateway-approval", request.id);
    // Focusing the host focuses its first button (Deny), so a keyboard user can answer.
    const root = host.attachShadow({ mode: "closed", delegatesFocus: true });
    const style = document.createElement("style");
    style.textContent = STYLE;
    const panel = element("section", "panel");
    panel.setAttribute("role", "alertdialog");
    panel.setAttribute("aria-label", `Approve ${request.tool}?`);
    panel.append(element("p", "title", `Approve ${request.tool}?`), element("p", "summary", request.summary || ""));
    const details = element("ul", "details");
    for (const [key, value] of Object.entries(request.details || {})) {
      if (value === null || value === undefined) continue;
      details.append(element("li", "detail", `${key}: ${typeof value === "string" ? value : JSON.stringify(value)}`));
    }
    if (details.childElementCount) panel.append(details);
    const note = element("p", "note");
    const buttons = [];
    const answerable = request.answerable && typeof request.nonce === "string";
    if (answerable) {
      panel.append(element("p", "scope", taskScope(request)));
      const actions = element("div", "actions");
      for (const [label, part, decision, scope] of [
        ["Deny", "button deny", "deny", "call"],
        ["Approve once", "button approve", "approve", "call"],
        ["Approve for this task", "button approve-task", "approve", "task"],
      ]) {
        const button = element("button", part, label);
        button.type = "button";
        button.disabled = true;
        button.addEventListener("click", (event) => this._clicked(event, request, decision, scope));
        buttons.push(button);
        actions.append(button);
      }
      panel.append(actions);
      note.textContent = NOT_YET;
    } else {
      note.textContent = WAITING;
    }
    panel.append(note);
    root.append(style, panel);
    // Drawn hidden first: measured, then placed where it will stay.
    panel.style.visibility = "hidden";
    (this._container || document.body).append(host);
    const shown = {
      host, panel, request, note, buttons, answerable,
      placed: false, fixed: false, bottom: 0, height: 0,
      armed: false, sent: false, where: "", since: 0, visible: undefined, observer: null,
    };
    this._shown.set(request.id, shown);
    this._place(shown);
    if (answerable) this._watch(shown);
    const { nonce: _n, ...visible } = request;
    this._emit("approval", visible);
  }

  /** Put a panel where it stays: in the default (fixed) layout, the lowest free slot of
   * the column that holds it whole, or nowhere yet. */
  _place(shown) {
    const style = globalThis.getComputedStyle ? getComputedStyle(shown.panel) : null;
    shown.fixed = Boolean(style && style.position === "fixed");
    if (shown.fixed) {
      const height = shown.panel.getBoundingClientRect().height;
      const room = (globalThis.innerHeight || 0) - EDGE_PX;
      const taken = [...this._shown.values()]
        .filter((other) => other !== shown && other.placed && other.fixed)
        .map((other) => [other.bottom, other.bottom + other.height + GAP_PX]);
      const candidates = [EDGE_PX, ...taken.map(([, top]) => top)].sort((a, b) => a - b);
      const bottom = candidates.find(
        (low) =>
          low + height <= room &&
          taken.every(([start, end]) => low + height + GAP_PX <= start || low >= end),
      );
      // No room for it whole: it waits, not drawn, until a panel closes.
      if (bottom === undefined && taken.length) return;
      shown.bottom = bottom === undefined ? EDGE_PX : bottom;
      shown.height = height;
      shown.panel.style.bottom = `${shown.bottom}px`;
    }
    shown.placed = true;
    shown.panel.style.visibility = "";
    shown.since = performance.now();
  }

  _watch(shown) {
    if (typeof IntersectionObserver === "function") {
      shown.visible = false;
      try {
        // trackVisibility: occluded, transparent or transformed counts as not visible.
        shown.observer = new IntersectionObserver(
          (entries) => {
            for (const entry of entries) {
              shown.visible =
                entry.isIntersecting && entry.intersectionRatio >= 0.99 && entry.isVisible !== false;
            }
          },
          { threshold: [0.99, 1], trackVisibility: true, delay: CHECK_MS },
        );
        shown.observer.observe(shown.panel);
      } catch {
        shown.visible = undefined;
      }
    }
    if (!this._timer) this._timer = setInterval(() => this._tick(), CHECK_MS);
  }

  /** Arm a panel that has held still in view for ARM_MS; disarm one that moved or hid. */
  _tick() {
    const now = performance.now();
    let watching = false;
    for (const shown of this._shown.values()) {
      if (!shown.answerable || shown.sent) continue;
      watching = true;
      const still = this._still(shown);
      if (!still) {
        shown.since = now;
        if (shown.armed) this._arm(shown, false);
      } else if (!shown.armed && now - shown.since >= ARM_MS) {
        this._arm(shown, true);
      }
    }
    if (!watching && this._timer) {
      clearInterval(this._timer);
      this._timer = null;
    }
  }

  /** Whether the panel is in view, unoccluded, and where it was when last looked at. */
  _still(shown) {
    if (!shown.placed) return false;
    const r = shown.panel.getBoundingClientRect();
    const where = `${r.left},${r.top},${r.width},${r.height}`;
    const moved = where !== shown.where;
    shown.where = where;
    const inView =
      r.width > 0 && r.height > 0 && r.top >= 0 && r.left >= 0 &&
      r.bottom <= globalThis.innerHeight && r.right <= globalThis.innerWidth;
    const seen = document.visibilityState !== "hidden" && shown.visible !== false;
    return !moved && inView && seen;
  }

  _arm(shown, on) {
    shown.armed = on;
    for (const button of shown.buttons) button.disabled = !on;
    shown.host.toggleAttribute("data-ready", on);
    if (shown.note.textContent === NOT_YET || on) shown.note.textContent = on ? "" : NOT_YET;
    if (on) this._emit("approval_ready", { id: shown.request.id });
  }

  /** The approval has its outcome (`status`), or is about to be shown again (null). */
  close(id, status) {
    const shown = this._shown.get(id);
    if (!shown) return;
    this._shown.delete(id);
    if (shown.observer) shown.observer.disconnect();
    shown.host.remove();
    // A slot freed: panels that found no room take it, in the order they came.
    for (const waiting of this._shown.values()) if (!waiting.placed) this._place(waiting);
    if (status) this._emit("approval_closed", { id, status });
  }

  /** The gateway refused an answer: say why, and let the person try again if they can. */
  refused(id, message) {
    const shown = this._shown.get(id);
    if (!shown) return;
    shown.note.textContent = String(message || "The answer was refused.");
    shown.sent = false;
    for (const button of shown.buttons) button.disabled = !shown.armed;
  }

  /** Everything shown goes (the channel is over for this page). */
  clear() {
    for (const id of [...this._shown.keys()]) this.close(id, null);
    if (this._timer) clearInterval(this._timer);
    this._timer = null;
  }

  _clicked(event, request, decision, scope) {
    const shown = this._shown.get(request.id);
    if (!shown || shown.request !== request) return;
    if (!event.isTrusted) {
      // A script clicked: that is not a person's answer.
      this._emit("approval_refused", { id: request.id, reason: "untrusted_event" });
      return;
    }
    // Looked at again now, not only at the last tick: it must not have moved since.
    if (!shown.armed || !this._still(shown)) {
      if (shown.armed) this._arm(shown, false);
      shown.since = performance.now();
      this._emit("approval_refused", { id: request.id, reason: "not_ready" });
      return;
    }
    if (!this._answer(request, decision, scope)) {
      shown.note.textContent = "Not connected to the gateway; try again in a moment.";
      return;
    }
    shown.sent = true;
    for (const button of shown.buttons) button.disabled = true;
    shown.note.textContent = "Sent.";
  }
}
