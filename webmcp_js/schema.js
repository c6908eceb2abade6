// schema.js: a JSON-schema validator for the schemas the gateway's models write (the UI
// actions' schemas in tab-rules.js, and the params schema of each view in `welcome`).
//
// Only the keywords those schemas use are applied: $ref into $defs, anyOf, const, enum,
// type, string lengths (in code points, as the gateway counts them) and pattern, number
// bounds, array items and lengths, object properties, required and additionalProperties,
// and the two rules a schema cannot say, marked `x-label` (the label rule) and `x-text`
// (the text rule: no NUL), both the gateway's, from tab-rules.js. It is meant to refuse
// what the gateway's own validation refuses (the parity test of the real-browser suites
// holds the two to the same verdicts), with a message naming where.

import { unsafeReason } from "./labels.js";
import { RULES } from "./tab-rules.js";

// A guard of this module's own, not a rule of the gateway's: a schema nested deeper than
// this is refused rather than walked (the gateway's schemas are a few levels deep).
const MAX_SCHEMA_DEPTH = 32;
const SURROGATE = /[\ud800-\udfff]/;
const TEXT_REFUSED = new RegExp(RULES.text.refused);

// Characters, as the gateway counts them (code points, not UTF-16 units).
function length(text) {
  return SURROGATE.test(text) ? Array.from(text).length : text.length;
}

export function isPlainObject(value) {
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
// order, the same messages); actions.js compiles the action schemas when it loads, a view's
// params schema the first time an open_view names it. A `$ref`'s target is compiled
// on first use, so a recursive schema costs only what the values met so far walk through.
// Each validator is `(value, where) => reason or null`.
const NESTED_TOO_DEEPLY = (_value, where) => `${where} is nested too deeply`;
// The validator of a schema that constrains nothing.
export const ANYTHING = () => null;
// A schema that is not an object (null, true, 1) checks nothing: what it guards is refused,
// so the request gets its invalid_input answer instead of throwing in the message handler.
const NOT_A_SCHEMA = (_value, where) => `${where} has no valid schema`;
const isSchema = (schema) => schema !== null && typeof schema === "object";

function child(schema, root, depth) {
  if (!isPlainObject(schema) || typeof schema.$ref !== "string") return compileSchema(schema, root, depth);
  let check = null;
  return (value, where) => (check || (check = compileSchema(schema, root, depth)))(value, where);
}

/**
 * A validator of `schema` (a JSON schema as the gateway's models write them), whose `$ref`s
 * point into `root.$defs`. `skip`: a key the value carries that is not one of its fields.
 */
export function compileSchema(schema, root, depth = 0, skip = null) {
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
    if (text && TEXT_REFUSED.test(value)) return `${where} ${RULES.text.reason}`;
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
