// actions.js: the closed allowlist of UI actions, applied on the page before its handler
// sees one, and the recheck of an action aimed at an older revision of the page.
//
// The action types and their schemas are the gateway's (its UI action models, compiled
// into tab-rules.js): each is compiled into a validator when this module loads; a view's
// params schema, from `welcome`, the first time an open_view names it.

import { checkLabels } from "./labels.js";
import { ANYTHING, compileSchema, isPlainObject } from "./schema.js";
import { RULES } from "./tab-rules.js";

export const ACTION_TYPES = Object.freeze(Object.keys(RULES.actions));

// An action carries its `type` beside its fields: the schema's check skips it.
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

const TARGET = RULES.target;

/** Whether an action aimed at an older revision still fits the current view: the gateway's
 * rule (its target recheck, beside the UI action models), read from its tables in
 * tab-rules.js. */
export function targetHolds(action, view) {
  if (TARGET.absolute.includes(action.type)) return true;
  const offered = view && view.available_actions;
  if (Array.isArray(offered) && !offered.includes(action.type)) return false;
  const field = Object.hasOwn(TARGET.bound, action.type) ? TARGET.bound[action.type] : null;
  const bound = field === null ? null : action[field];
  if (bound === undefined || bound === null) return true;
  return TARGET.naming.some((name) => isPlainObject(view && view[name]) && view[name][field] === bound);
}
