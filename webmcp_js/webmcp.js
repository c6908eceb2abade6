// webmcp.js: connect a dashboard page to its task's gateway tab channel, and (optionally)
// register the task's tool catalog as WebMCP tools so a browser agent can call them.
//
//   import { connectGateway } from "<gateway>/webmcp.js";
//   const session = await connectGateway({ gateway, token, task, actions, view, webmcp: true });
//
// A plain ES module with no dependencies and no build step. The token travels only in the
// first websocket frame (never in a URL); the task id, when given, travels in the URL as
// `?task=`, so that a cluster's balancer sends the tab to the node that holds its task.
// Every UI action the gateway sends is validated against the same closed allowlist the
// gateway uses before the page's handler sees it, and its strings are handed over as data:
// handlers must display them as text (textContent).

import { ApprovalPanel } from "./approval.js";
import { RULES } from "./tab-rules.js";

// Every rule an action must pass comes from the gateway's Python models, compiled into
// tab-rules.js (`python -m gateway.tabs.rules`): the action types and their fields,
// patterns and limits, the label rule, close codes and id formats. This module only applies
// them, so the page holds the same line even if a gateway sent something it should not.
export const ACTION_TYPES = Object.freeze(Object.keys(RULES.actions));

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
const CONTROL = new RegExp(RULES.label.control);
const WHITESPACE = new RegExp(RULES.label.whitespace, "g");
const URL_SCHEME = new RegExp(RULES.label.url);
const PSEUDO_SCHEME = new RegExp(RULES.label.pseudo);
const TAG = new RegExp(RULES.label.tag);
const SURROGATE = /[\ud800-\udfff]/;
const MAX_SCHEMA_DEPTH = 32;

/** Why a label may not travel in a UI action, or null when it may (the gateway's rule). */
export function unsafeReason(value) {
  if (typeof value !== "string") return "not a string";
  if (CONTROL.test(value)) return "control characters are not allowed";
  const folded = value.replace(WHITESPACE, "").toLowerCase();
  if (URL_SCHEME.test(folded) || folded.startsWith("//") || folded.startsWith("\\\\")) {
    return "a URL is not allowed here";
  }
  if (PSEUDO_SCHEME.test(folded)) return "a script or data URL is not allowed here";
  if (TAG.test(value.toLowerCase())) return "markup is not allowed here";
  return null;
}

// Characters, as the gateway counts them (code points, not UTF-16 units).
function length(text) {
  return SURROGATE.test(text) ? Array.from(text).length : text.length;
}

function checkLabels(value, where, depth = 0) {
  if (depth > RULES.label.max_depth) return `${where} is nested too deeply`;
  if (typeof value === "string") {
    const reason = unsafeReason(value);
    return reason ? `${where}: ${reason}` : null;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const reason = checkLabels(value[i], `${where}[${i}]`, depth + 1);
      if (reason) return reason;
    }
    return null;
  }
  if (value !== null && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) {
      const reason = checkLabels(key, where, depth + 1) || checkLabels(item, `${where}.${key}`, depth + 1);
      if (reason) return reason;
    }
  }
  return null;
}

function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

const compiled = new Map();
function pattern(source) {
  let regexp = compiled.get(source);
  if (!regexp) compiled.set(source, (regexp = new RegExp(source)));
  return regexp;
}

function resolve(schema, root) {
  if (typeof schema.$ref !== "string") return schema;
  const name = schema.$ref.split("/").pop();
  return (root.$defs && root.$defs[name]) || {};
}

// A schema is compiled once into a tree of closures that check a value against it, with
// exactly the rules a walk of the schema would apply each time (the same keywords, the same
// order, the same messages). The action schemas are compiled when this module loads; a
// view's params schema the first time an open_view names it. A `$ref`'s target is compiled
// on first use, so a recursive schema costs only what the values met so far walk through.
// Each validator is `(value, where) => reason or null`.
const NESTED_TOO_DEEPLY = (_value, where) => `${where} is nested too deeply`;
const ANYTHING = () => null;
// A schema that is not an object (null, true, 1) checks nothing: what it guards is refused,
// so the request gets its invalid_input answer instead of throwing in the message handler.
const NOT_A_SCHEMA = (_value, where) => `${where} has no valid schema`;
const isSchema = (schema) => schema !== null && typeof schema === "object";

function child(schema, root, depth) {
  if (!isPlainObject(schema) || typeof schema.$ref !== "string") return compileSchema(schema, root, depth);
  let check = null;
  return (value, where) => (check || (check = compileSchema(schema, root, depth)))(value, where);
}

/** A validator of `schema` (a JSON schema as the gateway's models write them). */
function compileSchema(schema, root, depth = 0, skip = null) {
  if (depth > MAX_SCHEMA_DEPTH) return NESTED_TOO_DEEPLY;
  if (!isSchema(schema)) return NOT_A_SCHEMA;
  schema = resolve(schema, root);
  if (!isSchema(schema)) return NOT_A_SCHEMA;
  if (Array.isArray(schema.anyOf)) {
    const options = schema.anyOf.map((option) => child(option, root, depth + 1));
    return (value, where) => {
      let first = null;
      for (let i = 0; i < options.length; i++) {
        const reason = options[i](value, where);
        if (!reason) return null;
        first = first || reason;
      }
      return first || `${where} is not allowed`;
    };
  }
  const typed = compileType(schema, root, depth, skip);
  const hasConst = "const" in schema;
  const constant = schema.const;
  const allowed = Array.isArray(schema.enum) ? schema.enum : null;
  if (!hasConst && !allowed) return typed;
  return (value, where) => {
    if (hasConst && value !== constant) return `${where} is not allowed`;
    if (allowed && !allowed.includes(value)) return `${where} is not one of the allowed values`;
    return typed(value, where);
  };
}

function compileType(schema, root, depth, skip) {
  switch (schema.type) {
    case "null":
      return (value, where) => (value === null ? null : `${where} must be null`);
    case "string":
      return compileString(schema);
    case "integer":
    case "number":
      return compileNumber(schema);
    case "boolean":
      return (value, where) => (typeof value === "boolean" ? null : `${where} must be true or false`);
    case "array":
      return compileArray(schema, root, depth);
    case "object":
      return compileObject(schema, root, depth, skip);
    default:
      return ANYTHING;
  }
}

function compileString(schema) {
  const min = schema.minLength;
  const max = schema.maxLength;
  const form = schema.pattern === undefined ? null : pattern(schema.pattern);
  const text = Boolean(schema["x-text"]);
  const label = Boolean(schema["x-label"]);
  const short = min === 1 ? "must not be empty" : `is shorter than ${min}`;
  return (value, where) => {
    if (typeof value !== "string") return `${where} must be a string`;
    // Code points lie between half the UTF-16 units and all of them: count them only when
    // the units alone cannot settle a bound.
    let size = value.length;
    if ((min !== undefined && size < 2 * min) || (max !== undefined && size > max)) size = length(value);
    if (min !== undefined && size < min) return `${where} ${short}`;
    if (max !== undefined && size > max) return `${where} is longer than ${max}`;
    if (form !== null && !form.test(value)) return `${where} is not in the allowed form`;
    if (text && value.includes("\u0000")) return `${where} must not contain NUL`;
    if (label) {
      const reason = unsafeReason(value);
      if (reason) return `${where}: ${reason}`;
    }
    return null;
  };
}

function compileNumber(schema) {
  const integer = schema.type === "integer";
  const { minimum, maximum, exclusiveMinimum, exclusiveMaximum } = schema;
  return (value, where) => {
    if (typeof value !== "number" || !Number.isFinite(value)) return `${where} must be a number`;
    if (integer && !Number.isInteger(value)) return `${where} must be a whole number`;
    if (minimum !== undefined && value < minimum) return `${where} is below ${minimum}`;
    if (maximum !== undefined && value > maximum) return `${where} is above ${maximum}`;
    if (exclusiveMinimum !== undefined && value <= exclusiveMinimum) return `${where} is too small`;
    if (exclusiveMaximum !== undefined && value >= exclusiveMaximum) return `${where} is too large`;
    return null;
  };
}

function compileArray(schema, root, depth) {
  const { minItems, maxItems } = schema;
  const items = isPlainObject(schema.items) ? child(schema.items, root, depth + 1) : null;
  return (value, where) => {
    if (!Array.isArray(value)) return `${where} must be a list`;
    if (minItems !== undefined && value.length < minItems) return `${where} has too few items`;
    if (maxItems !== undefined && value.length > maxItems) return `${where} has more than ${maxItems} items`;
    if (items !== null) {
      for (let i = 0; i < value.length; i++) {
        const reason = items(value[i], `${where}[${i}]`);
        if (reason) return reason;
      }
    }
    return null;
  };
}

// Whether `name` is in the value's fields, `skip` left out: what `name in {...value}` says
// with `skip` removed from the copy (own enumerable keys, and Object.prototype's).
function hasField(value, name, skip) {
  return name !== skip && (Object.prototype.propertyIsEnumerable.call(value, name) || name in Object.prototype);
}

// `skip`: a key the value carries that is not one of its fields (an action's `type`).
function compileObject(schema, root, depth, skip) {
  const props = isPlainObject(schema.properties) ? schema.properties : {};
  const fields = new Map();
  for (const name of Object.keys(props)) {
    const rule = props[name];
    fields.set(name, rule === false ? false : isPlainObject(rule) ? child(rule, root, depth + 1) : ANYTHING);
  }
  const extra = schema.additionalProperties;
  const others = extra === false ? false : isPlainObject(extra) ? child(extra, root, depth + 1) : ANYTHING;
  const required = Array.isArray(schema.required) ? schema.required : [];
  return (value, where) => {
    if (!isPlainObject(value)) return `${where} must be an object`;
    for (let i = 0; i < required.length; i++) {
      const name = required[i];
      if (skip === null ? !(name in value) : !hasField(value, name, skip)) return `${where}.${name} is required`;
    }
    const names = Object.keys(value);
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      if (name === skip) continue;
      const rule = fields.has(name) ? fields.get(name) : others;
      if (rule === false) return `${where} has no field ${name.slice(0, 64)}`;
      if (rule !== ANYTHING) {
        const reason = rule(value[name], `${where}.${name}`);
        if (reason) return reason;
      }
    }
    return null;
  };
}

const ACTION_CHECKS = new Map(
  Object.keys(RULES.actions).map((type) => [type, compileSchema(RULES.actions[type], RULES.actions[type], 0, "type")]),
);
const PARAMS_CHECKS = new WeakMap(); // a view's params schema -> its validator

function paramsCheck(schema) {
  if (!isPlainObject(schema)) return ANYTHING;
  let check = PARAMS_CHECKS.get(schema);
  if (!check) PARAMS_CHECKS.set(schema, (check = compileSchema(schema, schema)));
  return check;
}

/**
 * Validate a UI action from the gateway against the allowlist; returns an error message or
 * null. `views` is the list from `welcome`.
 */
export function validateAction(action, views) {
  if (!isPlainObject(action)) return "the action must be an object";
  const type = action.type;
  const check = typeof type === "string" ? ACTION_CHECKS.get(type) : undefined;
  if (check === undefined) return `unknown action ${String(type).slice(0, 64)}`;
  const reason = check(action, type);
  if (reason || type !== "open_view") return reason;
  const view = (views || []).find((v) => v.name === action.view);
  if (!view) return `no view named ${action.view} is registered`;
  const params = action.params === undefined ? {} : action.params;
  return checkLabels(params, "params") || paramsCheck(view.params_schema)(params, "params");
}

/** Whether an action aimed at an older revision still fits the current view (same rule as the gateway). */
export function targetHolds(action, view) {
  if (action.type === "open_view" || action.type === "read_view") return true;
  const offered = view && view.available_actions;
  if (Array.isArray(offered) && !offered.includes(action.type)) return false;
  if (action.type === "populate_draft" && action.agent_id !== undefined) {
    const named = [view && view.params, view && view.selection]
      .filter(isPlainObject)
      .map((part) => part.agent_id);
    return named.includes(action.agent_id);
  }
  return true;
}

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

function modelContext() {
  return (globalThis.document && globalThis.document.modelContext) || (globalThis.navigator && globalThis.navigator.modelContext) || null;
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
    this._webmcp = options.webmcp !== false;
    this._ws = null;
    this._attempt = 0;
    this._requests = new Map(); // request id -> HandlerContext, while a handler's promise is pending
    this._calls = new Map(); // call id -> {resolve, tool}
    this._seq = 0;
    this._registration = null; // AbortController of the current WebMCP registrations
    this._registered = "";
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
    this._withdraw();
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
    this._register();
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

  // -- WebMCP ------------------------------------------------------------------------

  _register() {
    const mc = modelContext();
    if (!this._webmcp || !mc || typeof mc.registerTool !== "function") return;
    const signature = JSON.stringify(this.tools);
    if (this._registration && signature === this._registered) return;
    this._withdraw();
    const controller = new AbortController();
    this._registration = controller;
    this._registered = signature;
    for (const tool of this.tools) {
      const hints = tool.annotations || {};
      const definition = {
        name: tool.name,
        title: tool.title,
        description: tool.description || tool.title || tool.name,
        inputSchema: tool.input_schema || { type: "object" },
        annotations: {
          readOnlyHint: Boolean(hints.readOnlyHint),
          untrustedContentHint: Boolean(hints.untrustedContentHint),
          consequentialHint: Boolean(hints.consequentialHint),
        },
        execute: (input, client) => this._execute(tool.name, input, client && client.signal),
      };
      try {
        const registered = mc.registerTool(definition, { signal: controller.signal });
        // registerTool returns a promise that rejects when the registration is withdrawn
        // (our own abort, expected) or refused (a frame the `tools` permissions policy does
        // not allow), which the page should hear of.
        if (registered && typeof registered.catch === "function") {
          registered.catch((error) => {
            if (controller.signal.aborted) return;
            this._emit("error", { code: "webmcp_register_failed", message: String(error && error.message), tool: tool.name });
          });
        }
      } catch (error) {
        this._emit("error", { code: "webmcp_register_failed", message: String(error && error.message), tool: tool.name });
      }
    }
  }

  _withdraw() {
    if (this._registration) {
      this._registration.abort(new DOMException("the tab channel ended", "AbortError"));
      this._registration = null;
      this._registered = "";
    }
  }

  async _execute(name, input, signal) {
    const args = typeof input === "string" ? JSON.parse(input || "{}") : input ?? {};
    const result = await this.call(name, args, { signal, via: "webmcp" });
    if (result.status !== "succeeded") {
      const error = result.error || {};
      const message = `${result.status} ${error.code || "error"}: ${error.message || ""}`;
      this._emit("toolerror", { tool: name, message, result });
      throw new Error(message);
    }
    return result.output === undefined ? null : result.output;
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
