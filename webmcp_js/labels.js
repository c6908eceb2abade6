// labels.js: the label rule, "no URL, no markup", that every string naming something in a UI
// action must pass (a view's params, and the fields the action schemas mark `x-label`).
//
// The rule itself (its patterns, depth bound and the words of its refusals) is the
// gateway's, compiled from its view models into tab-rules.js; this module only applies
// it.

import { RULES } from "./tab-rules.js";

const CONTROL = new RegExp(RULES.label.control);
const WHITESPACE = new RegExp(RULES.label.whitespace, "g");
const URL_SCHEME = new RegExp(RULES.label.url);
const RELATIVE_URL = new RegExp(RULES.label.relative);
const PSEUDO_SCHEME = new RegExp(RULES.label.pseudo);
const TAG = new RegExp(RULES.label.tag);
const REFUSED = RULES.label.refused;

/** Why a label may not travel in a UI action, or null when it may (the gateway's rule). */
export function unsafeReason(value) {
  if (typeof value !== "string") return "not a string";
  if (CONTROL.test(value)) return REFUSED.control;
  const folded = value.replace(WHITESPACE, "").toLowerCase();
  if (URL_SCHEME.test(folded) || RELATIVE_URL.test(folded)) return REFUSED.url;
  if (PSEUDO_SCHEME.test(folded)) return REFUSED.pseudo;
  if (TAG.test(value.toLowerCase())) return REFUSED.tag;
  return null;
}

/** Why some string in a JSON value (keys included) is not a safe label, or null. */
export function checkLabels(value, where, depth = 0) {
  if (depth > RULES.label.max_depth) return `${where} ${REFUSED.too_deep}`;
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
