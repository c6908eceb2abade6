// webmcp.js: connect a dashboard page to its task's gateway tab channel, and (optionally)
// register the task's tool catalog as WebMCP tools so a browser agent can call them.
//
//   import { connectGateway } from "<gateway>/webmcp.js";
//   const session = await connectGateway({ gateway, token, task, actions, view, webmcp: true });
//
// Plain ES modules (this one and the siblings it imports) with no dependencies and no build
// step. The token travels only in the first websocket frame (never in a URL); the task id,
// when given, travels in the URL as `?task=`, so that a cluster's balancer sends the tab to
// the node that holds its task. Every UI action the gateway sends is validated against the
// same closed allowlist the gateway uses before the page's handler sees it, and its strings
// are handed over as data: handlers must display them as text (textContent).
//
// This module is the tab channel itself (connection, frames, replies); beside it, actions.js
// validates the actions (with schema.js and labels.js), webmcp-tools.js registers the
// catalog with the page's model context, and approval.js shows approvals.

import { targetHolds, validateAction } from "./actions.js";
import { ApprovalPanel } from "./approval.js";
import { isPlainObject } from "./schema.js";
import { RULES } from "./tab-rules.js";
import { WebMCPTools } from "./webmcp-tools.js";

// Every rule an action must pass comes from the gateway's Python models, compiled into
// tab-rules.js (`python -m gateway.tabs.rules`): the action types and their fields,
// patterns and limits, the label rule, close codes and id formats. The modules beside this
// one only apply them (actions.js, with schema.js and labels.js), so the page holds the same
// line even if a gateway sent something it should not.
export { ACTION_TYPES, targetHolds, validateAction } from "./actions.js";
export { unsafeReason } from "./labels.js";

export const CLOSE = Object.freeze({
  POLICY: RULES.close.policy,
  TOO_LARGE: RULES.close.too_large,
  SUPERSEDED: RULES.close.superseded,
  TASK_ENDED: RULES.close.task_ended,
  TOKEN_EXPIRED: RULES.close.token_expired,
});
// After these the channel is over for this page: reconnecting cannot help.
const FINAL_CLOSES = new Set([CLOSE.POLICY, CLOSE.SUPERSEDED, CLOSE.TASK_ENDED, CLOSE.TOKEN_EXPIRED]);

const TAB_ID = new RegExp(RULES.ids.tab);
const TASK_ID = new RegExp(RULES.ids.task);

// Set by HandlerContext's static block: the session's hold on a request's context.
let abortRequest;
let requestAborted;

// What a page's handler gets as its second argument: {id, signal, revision}. The signal's
// AbortController is made only when the handler asks for it; a cancel that came before
// then gives it an aborted one.
class HandlerContext {
  #controller = null;
  #aborted = false;
  #reason = undefined;

  constructor(id, revision) {
    this.id = id;
    this.revision = revision;
  }

  get signal() {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  static {
    abortRequest = (context, reason) => {
      if (context.#aborted) return;
      context.#aborted = true;
      context.#reason = reason;
      if (context.#controller !== null) context.#controller.abort(reason);
    };
    requestAborted = (context) => context.#aborted;
  }
}
function defaultTabId() {
  const key = "gateway.tab_id";
  try {
    const kept = globalThis.sessionStorage && sessionStorage.getItem(key);
    if (kept && TAB_ID.test(kept)) return kept;
    const made = `tab_${globalThis.crypto.randomUUID()}`;
    if (globalThis.sessionStorage) sessionStorage.setItem(key, made);
    return made;
  } catch {
    return `tab_${globalThis.crypto.randomUUID()}`;
  }
}

// `task`: the balancer's locality hint only; the gateway reads the task from the token.
function wsUrl(gateway, task) {
  const base = new URL(gateway, globalThis.location ? globalThis.location.href : undefined);
  if (base.protocol !== "http:" && base.protocol !== "https:") throw new Error("gateway must be an http(s) URL");
  base.protocol = base.protocol === "https:" ? "wss:" : "ws:";
  base.pathname = `${base.pathname.replace(/\/+$/, "")}/v1/tabs`;
  base.search = task === undefined ? "" : new URLSearchParams({ task }).toString();
  base.hash = "";
  return base.href;
}

function cloneJson(value) {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

class GatewaySession extends EventTarget {
  // The approval element and its nonces; an answer needs a person's trusted event.
  #approvals;

  constructor(options) {
    super();
    if (!options || typeof options.token !== "string" || !options.token) throw new Error("connectGateway needs a token");
    const task = options.task ?? undefined;
    if (task !== undefined && (typeof task !== "string" || !TASK_ID.test(task))) {
      throw new Error(`connectGateway's task must be the task's id (${RULES.ids.task})`);
    }
    this.gateway = String(options.gateway);
    this.url = wsUrl(this.gateway, task);
    this.tabId = options.tabId || defaultTabId();
    if (!TAB_ID.test(this.tabId)) throw new Error("tabId must be 1 to 128 of [A-Za-z0-9_.:-]");
    this.taskId = null;
    this.revision = 0;
    this.tools = [];
    this.views = [];
    this.connected = false;
    this.closed = false;
    this._token = options.token;
    this._actions = Object.assign(Object.create(null), options.actions || {});
    this._viewFn = typeof options.view === "function" ? options.view : null;
    this._lastView = { view: null, params: {}, selection: {} };
    this._webmcp = new WebMCPTools({
      enabled: options.webmcp !== false,
      call: (tool, input, callOptions) => this.call(tool, input, callOptions),
      emit: (type, detail) => this._emit(type, detail),
    });
    this._ws = null;
    this._attempt = 0;
    this._requests = new Map(); // request id -> HandlerContext, while a handler's promise is pending
    this._calls = new Map(); // call id -> {resolve, tool}
    this._seq = 0;
    this._expiryTimer = null;
    this._replyHead = null;
    this._retryTimer = null;
    this._first = null;
    this._listened = new Set();
    this.#approvals = new ApprovalPanel({
      container: options.approvalContainer,
      answer: (request, decision, scope) => this.#answer(request, decision, scope),
      emit: (type, detail) => this._emit(type, detail),
    });
    this._onPageHide = () => this._stop("pagehide");
    if (globalThis.addEventListener) globalThis.addEventListener("pagehide", this._onPageHide);
  }

  /** The page navigated or its view changed: bump the revision and tell the gateway. */
  state(view = {}) {
    const given = cloneJson(view) || {};
    this._lastView = { ...this._lastView, ...given };
    this.revision += 1;
    // What the page says it now shows wins over a `view()` callback that may lag behind.
    this._send({ type: "state", revision: this.revision, view: { ...this.snapshot(), ...given } });
    return this.revision;
  }

  /** What the page shows now: `view()` if given, else the last `state()`. */
  snapshot() {
    const current = this._viewFn ? cloneJson(this._viewFn()) || {} : { ...this._lastView };
    return { params: {}, selection: {}, ...current };
  }

  /**
   * Call a gateway tool under the tab's identity. Resolves with the terminal result
   * `{call_id, tool, status, output?, error?}`; never rejects for a call failure.
   */
  call(tool, input = {}, { signal, via = "page" } = {}) {
    const id = `k${++this._seq}_${Date.now().toString(36)}`;
    return new Promise((resolve, reject) => {
      if (!this.connected) {
        resolve({ tool, status: "unavailable", error: { code: "tab_unavailable", message: "the tab channel is not connected", retryable: true } });
        return;
      }
      if (signal && signal.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = () => {
        this._send({ type: "cancel", id });
        this._calls.delete(id);
        reject(signal.reason);
      };
      this._calls.set(id, {
        tool,
        resolve: (result) => {
          if (signal) signal.removeEventListener("abort", onAbort);
          resolve(result);
        },
      });
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
      this._send({ type: "tool_call", id, tool, input: input ?? {}, via });
    });
  }

  /** Leave the channel for good: withdraw WebMCP tools, close the websocket. */
  close() {
    this._stop("closed");
  }

  // -- connection --------------------------------------------------------------------

  _open() {
    if (this.closed) return;
    const ws = new WebSocket(this.url);
    this._ws = ws;
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: "hello", token: this._token, tab_id: this.tabId, revision: this.revision, view: this.snapshot() }));
    };
    ws.onmessage = (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      this._frame(frame);
    };
    ws.onclose = (event) => this._closed(ws, event.code, event.reason);
  }

  _closed(ws, code, reason) {
    if (this._ws !== ws) return;
    const wasConnected = this.connected;
    this.connected = false;
    this._ws = null;
    for (const context of this._requests.values()) abortRequest(context, new DOMException("the channel closed", "AbortError"));
    this._requests.clear();
    for (const [id, pending] of this._calls) {
      pending.resolve({ tool: pending.tool, status: "unavailable", error: { code: "tab_unavailable", message: "the tab channel closed", retryable: true } });
      this._calls.delete(id);
    }
    this._emit("disconnect", { code, reason });
    if (this._first) {
      const first = this._first;
      this._first = null;
      first.reject(new Error(`the gateway refused the tab channel (${code}${reason ? ` ${reason}` : ""})`));
      this._stop("refused");
      return;
    }
    if (this.closed) return;
    if (FINAL_CLOSES.has(code)) {
      this._stop(code === CLOSE.SUPERSEDED ? "superseded" : code === CLOSE.TASK_ENDED ? "task_ended" : code === CLOSE.TOKEN_EXPIRED ? "token_expired" : "policy");
      return;
    }
    const delay = Math.min(10000, 250 * 2 ** this._attempt) * (0.75 + Math.random() * 0.5);
    this._attempt = wasConnected ? 1 : this._attempt + 1;
    this._retryTimer = setTimeout(() => this._open(), delay);
  }

  _stop(reason) {
    if (this.closed) return;
    this.closed = true;
    this._webmcp.withdraw();
    clearTimeout(this._retryTimer);
    clearTimeout(this._expiryTimer);
    if (globalThis.removeEventListener) globalThis.removeEventListener("pagehide", this._onPageHide);
    this.#approvals.clear();
    const ws = this._ws;
    if (ws && ws.readyState <= 1) ws.close(1000, reason);
    this._emit("closed", { reason });
  }

  _send(frame) {
    const ws = this._ws;
    if (ws && ws.readyState === 1 && (this.connected || frame.type === "hello")) ws.send(JSON.stringify(frame));
  }

  addEventListener(type, listener, options) {
    this._listened.add(type);
    super.addEventListener(type, listener, options);
  }

  _emit(type, detail) {
    // Building an event costs more than the rest of a request's handling; skip it when
    // nobody listens for this type.
    if (this._listened.has(type)) this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  // -- incoming frames ---------------------------------------------------------------

  _frame(frame) {
    switch (frame && frame.type) {
      case "welcome":
        return this._welcome(frame);
      case "request":
        return void this._request(frame);
      case "cancel": {
        const context = this._requests.get(frame.id);
        if (context) {
          this._requests.delete(frame.id);
          abortRequest(context, new DOMException(String(frame.reason || "cancelled"), "AbortError"));
        }
        return this._emit("cancel", { id: frame.id, reason: frame.reason });
      }
      case "tool_result": {
        const pending = this._calls.get(frame.id);
        if (pending) {
          this._calls.delete(frame.id);
          const { type: _t, id: _i, ...result } = frame;
          pending.resolve(result);
        }
        return;
      }
      case "ping":
        return this._send({ type: "pong" });
      case "error":
        if (typeof frame.id === "string") this.#approvals.refused(frame.id, frame.message);
        return this._emit("error", { code: frame.code, message: frame.message, id: frame.id });
      case "approval_request":
        return this.#approvals.show(frame);
      case "approval_closed":
        return this.#approvals.close(frame.id, frame.status);
      case "bye":
        this._emit("bye", { reason: frame.reason });
        return this._stop(frame.reason || "bye");
      default:
        return;
    }
  }

  _welcome(frame) {
    this.connected = true;
    this._attempt = 0;
    this.taskId = frame.task_id;
    // A reply's task and tab, as JSON, for the replies written out directly.
    this._replyHead = typeof this.taskId === "string" ? `"task_id":${JSON.stringify(this.taskId)},"tab_id":${JSON.stringify(this.tabId)}` : null;
    this.tools = Array.isArray(frame.tools) ? frame.tools : [];
    this.views = Array.isArray(frame.views) ? frame.views : [];
    clearTimeout(this._expiryTimer);
    if (typeof frame.expires_at === "number" && frame.expires_at > 0) {
      const wait = Math.max(0, frame.expires_at * 1000 - Date.now());
      this._expiryTimer = setTimeout(() => this._stop("token_expired"), Math.min(wait, 2 ** 31 - 1));
    }
    this._webmcp.register(this.tools);
    this._emit("welcome", { task_id: this.taskId, tools: this.tools, views: this.views });
    if (this._first) {
      this._first.resolve(this);
      this._first = null;
    }
  }

  _request(frame) {
    const id = frame.id;
    const action = frame.action;
    const invalid = validateAction(action, this.views);
    if (invalid) {
      this._emit("refused", { id, reason: invalid });
      return this._reply(id, { ok: false, error: { code: "invalid_input", message: invalid } });
    }
    // The page moved since the gateway aimed this action: it has rechecked it against our
    // newer state and either re-aimed or cancelled it; apply only what still fits.
    if (frame.revision < this.revision && !targetHolds(action, this.snapshot())) {
      return this._emit("stale", { id, action });
    }
    // The action was parsed from this frame alone, so the page's handler can have it as is.
    const { type, ...args } = action;
    if (this._listened.has("request")) this._emit("request", { id, action: type, args });
    const aimedAt = this.revision;
    const context = new HandlerContext(id, aimedAt);
    let value;
    try {
      if (type === "read_view") {
        value = this._readView();
      } else {
        const handler = this._actions[type];
        if (typeof handler !== "function") throw Object.assign(new Error(`this page has no handler for ${type}`), { code: "unsupported_action" });
        value = handler(args, context);
      }
    } catch (error) {
      return this._failed(id, context, error);
    }
    // A handler that answers at once is replied to at once (no promise, no extra turn, and
    // nothing to cancel: a cancel frame cannot arrive while it runs); one that returns a
    // promise is cancellable until it settles.
    if (value !== null && typeof value === "object" && typeof value.then === "function") {
      this._requests.set(id, context);
      Promise.resolve(value).then(
        (settled) => this._applied(id, action, context, aimedAt, settled),
        (error) => this._failed(id, context, error),
      );
    } else {
      this._applied(id, action, context, aimedAt, value);
    }
  }

  _readView() {
    const view = this.snapshot();
    return {
      view: view.view ?? null,
      params: view.params ?? {},
      revision: this.revision,
      selection: view.selection ?? {},
      available_actions: view.available_actions ?? ["read_view", ...Object.keys(this._actions).filter((a) => Object.hasOwn(RULES.actions, a))],
    };
  }

  _applied(id, action, context, aimedAt, value) {
    if (requestAborted(context)) return;
    // The handler moved the page (or it moved while the handler worked) away from the
    // action's target: the gateway has cancelled it, and gets no reply.
    if (this.revision !== aimedAt && !targetHolds(action, this.snapshot())) return this._emit("stale", { id, action });
    this._requests.delete(id);
    const result = isPlainObject(value) ? value : {};
    if (this._listened.has("applied")) this._emit("applied", { id, action: action.type, result });
    // The reply written out directly: the same bytes as JSON.stringify of
    // {type, id, task_id, tab_id, revision, ok, result}, without building that object.
    const ws = this._ws;
    const head = this._replyHead;
    if (head !== null && typeof id === "string" && Number.isSafeInteger(this.revision) && ws && ws.readyState === 1 && this.connected) {
      const body = JSON.stringify(result);
      if (body !== undefined) {
        ws.send(`{"type":"reply","id":${JSON.stringify(id)},${head},"revision":${this.revision},"ok":true,"result":${body}}`);
        return;
      }
    }
    this._reply(id, { ok: true, result });
  }

  _failed(id, context, error) {
    if (requestAborted(context)) return;
    this._requests.delete(id);
    const code = error && typeof error.code === "string" ? error.code : "handler_error";
    this._reply(id, { ok: false, error: { code, message: String((error && error.message) || error).slice(0, 500) } });
  }

  _reply(id, body) {
    this._send({ type: "reply", id, task_id: this.taskId, tab_id: this.tabId, revision: this.revision, ...body });
  }

  // -- approvals ---------------------------------------------------------------------

  #answer(request, decision, scope) {
    if (!this.connected) return false;
    this._send({
      type: "approval",
      id: request.id,
      task_id: this.taskId,
      tab_id: this.tabId,
      revision: request.revision,
      nonce: request.nonce,
      decision,
      scope,
    });
    return true;
  }
}

/**
 * Connect this page to its task's tab channel. Resolves with the session once the gateway
 * has welcomed the tab; rejects if the first connection is refused.
 */
export function connectGateway(options) {
  const session = new GatewaySession(options);
  return new Promise((resolve, reject) => {
    session._first = { resolve, reject };
    session._open();
  });
}
