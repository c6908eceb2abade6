// approval.js: the element in which the shim shows a person what the task waits for them
// to approve, and takes their answer.
//
// The element is the shim's own: a host element whose shadow root is closed, so neither the
// page's scripts nor a UI action can reach its buttons or draw into it; the page may restyle
// it through its parts (::part(panel), summary, details, actions, button, deny, approve,
// approve-task, note). Text only: every string is set with textContent. An answer counts
// only from a trusted user event (a real click or key press, not a script's click()); the
// nonce that makes it an answer stays in this module's closure, never in the DOM.

const STYLE = `
  :host { all: initial; }
  [part~="panel"] {
    position: fixed; right: 16px; bottom: 16px; z-index: 2147483647; max-width: 420px;
    box-sizing: border-box; padding: 14px 16px; border-radius: 10px;
    background: #fff; color: #111; border: 1px solid #c7c7cc;
    box-shadow: 0 8px 24px rgba(0, 0, 0, 0.18);
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
`;

const WAITING = "Waiting for someone else to decide.";

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
    this._shown = new Map(); // approval id -> { host, request, note, buttons }
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
    if (request.answerable && typeof request.nonce === "string") {
      const actions = element("div", "actions");
      for (const [label, part, decision, scope] of [
        ["Deny", "button deny", "deny", "call"],
        ["Approve once", "button approve", "approve", "call"],
        ["Approve for this task", "button approve-task", "approve", "task"],
      ]) {
        const button = element("button", part, label);
        button.type = "button";
        button.addEventListener("click", (event) => this._clicked(event, request, decision, scope));
        buttons.push(button);
        actions.append(button);
      }
      panel.append(actions);
    } else {
      note.textContent = WAITING;
    }
    panel.append(note);
    root.append(style, panel);
    (this._container || document.body).append(host);
    this._shown.set(request.id, { host, request, note, buttons });
    const { nonce: _n, ...visible } = request;
    this._emit("approval", visible);
  }

  /** The approval has its outcome (`status`), or is about to be shown again (null). */
  close(id, status) {
    const shown = this._shown.get(id);
    if (!shown) return;
    this._shown.delete(id);
    shown.host.remove();
    if (status) this._emit("approval_closed", { id, status });
  }

  /** The gateway refused an answer: say why, and let the person try again if they can. */
  refused(id, message) {
    const shown = this._shown.get(id);
    if (!shown) return;
    shown.note.textContent = String(message || "The answer was refused.");
    for (const button of shown.buttons) button.disabled = false;
  }

  /** Everything shown goes (the channel is over for this page). */
  clear() {
    for (const id of [...this._shown.keys()]) this.close(id, null);
  }

  _clicked(event, request, decision, scope) {
    const shown = this._shown.get(request.id);
    if (!shown || shown.request !== request) return;
    if (!event.isTrusted) {
      // A script clicked: that is not a person's answer.
      this._emit("approval_refused", { id: request.id, reason: "untrusted_event" });
      return;
    }
    if (!this._answer(request, decision, scope)) {
      shown.note.textContent = "Not connected to the gateway; try again in a moment.";
      return;
    }
    for (const button of shown.buttons) button.disabled = true;
    shown.note.textContent = "Sent.";
  }
}
