// Types of webmcp.js, the gateway's tab channel and WebMCP shim. The actions' own types come
// from tab-rules.d.ts, generated from the gateway's models with the rules themselves.

import type {
  ActionType,
  DisplayProposedChangeAction,
  OpenViewAction,
  PopulateDraftAction,
  ShowRunProgressAction,
} from "./tab-rules.js";

export type { ActionType, UIAction } from "./tab-rules.js";

/** What a handler receives: the action's fields without its `type`. */
type Args<A> = Omit<A, "type">;
export type OpenViewArgs = Args<OpenViewAction>;
export type PopulateDraftArgs = Args<PopulateDraftAction>;
export type ShowRunProgressArgs = Args<ShowRunProgressAction>;
/** Free text: display with textContent, never innerHTML. */
export type DisplayProposedChangeArgs = Args<DisplayProposedChangeAction>;

export interface HandlerContext {
  /** The gateway's request id. */
  id: string;
  /** Aborted when the gateway cancels the request (reason "timeout", "cancelled", "stale_target"). */
  signal: AbortSignal;
  /** The page's revision when the handler was called. */
  revision: number;
}

type Handler<A> = (args: A, context: HandlerContext) => unknown | Promise<unknown>;

export interface ActionHandlers {
  open_view?: Handler<OpenViewArgs>;
  populate_draft?: Handler<PopulateDraftArgs>;
  show_run_progress?: Handler<ShowRunProgressArgs>;
  display_proposed_change?: Handler<DisplayProposedChangeArgs>;
}

export interface ViewState {
  view: string | null;
  params?: Record<string, unknown>;
  selection?: Record<string, unknown>;
  /** Actions this view offers; an action aimed at an older revision that is not listed is stale. */
  available_actions?: ActionType[];
}

export interface ConnectOptions {
  /** The gateway's base URL; the shim derives ws(s)://…/v1/tabs from it. */
  gateway: string;
  /** The task's tab token, from the host page's own backend. Sent in the first frame only. */
  token: string;
  /** The task's id (`task_` and 24 lowercase hex digits), as the control plane returned it
   * when it made the task. Sent as `?task=` in the websocket URL: a cluster's balancer routes
   * on it, so the tab reaches the node that holds its task. Only a hint; the gateway reads
   * the task from the token. A value that is not a task id makes connectGateway throw. */
  task?: string;
  /** Defaults to a per-tab id kept in sessionStorage. */
  tabId?: string;
  actions?: ActionHandlers;
  /** The current view, for read_view and the target recheck. */
  view?: () => ViewState;
  /** Register the catalog as WebMCP tools (default true). */
  webmcp?: boolean;
  /** Where the shim puts its approval elements (default: document.body). Restyle them
   * through their parts: panel, title, summary, details, scope, actions, button, deny,
   * approve, approve-task, note. A panel's buttons take an answer only once it has been
   * wholly in view, unoccluded and unmoved for `ARM_MS` (its host then has `data-ready`);
   * a layout of the host's own must keep panels still, or they do not wake. */
  approvalContainer?: HTMLElement;
}

/** An approval the tab shows ("approval" event); the nonce never leaves the shim. */
export interface ShownApproval {
  id: string;
  tool: string;
  summary: string;
  details: Record<string, unknown>;
  /** "control": someone else decides, and the tab shows it as waiting. */
  by: "actor" | "control";
  /** Why it asks: the task's `required`, beyond its grant, or the tool's own ask. */
  reason: "required" | "beyond the grant" | "the tool asks";
  /** Whether this tab's person may answer it here. */
  answerable: boolean;
  expires_at: number;
  revision: number;
}

export interface ToolError { code: string; message: string; retryable?: boolean; details?: unknown; }

export interface ToolResult {
  call_id?: string;
  tool: string;
  status: "succeeded" | "denied" | "unavailable" | "timeout" | "failed";
  output?: unknown;
  error?: ToolError;
  truncated?: boolean;
  replayed?: boolean;
}

export interface CatalogTool {
  name: string;
  title: string;
  description: string;
  input_schema: Record<string, unknown>;
  annotations: { readOnlyHint?: boolean; consequentialHint?: boolean; untrustedContentHint?: boolean };
  side_effects?: boolean;
}

export interface RegisteredView { name: string; title: string; params_schema: Record<string, unknown>; }

/**
 * Events: "welcome", "request", "applied", "cancel", "stale", "refused", "error", "toolerror",
 * "bye", "disconnect", "closed", "approval" (a `ShownApproval`), "approval_closed"
 * (`{id, status}`), "approval_ready" (`{id}`: its buttons now take an answer),
 * "approval_refused" (`{id, reason}`: "untrusted_event", a script's click, not a person's;
 * "not_ready", a click on a panel that moved or was not yet still)
 * (CustomEvent; details in `event.detail`).
 */
export interface GatewaySession extends EventTarget {
  readonly gateway: string;
  readonly tabId: string;
  readonly taskId: string | null;
  readonly revision: number;
  readonly tools: CatalogTool[];
  readonly views: RegisteredView[];
  readonly connected: boolean;
  readonly closed: boolean;
  /** The page navigated: bumps the revision and sends `state`. Returns the new revision. */
  state(view: ViewState): number;
  snapshot(): ViewState;
  /** Call a gateway tool under the tab's identity; resolves with the terminal result. */
  call(tool: string, input?: Record<string, unknown>, options?: { signal?: AbortSignal; via?: "page" | "webmcp" }): Promise<ToolResult>;
  close(): void;
}

export const ACTION_TYPES: readonly ActionType[];
export const CLOSE: Readonly<{ POLICY: 1008; TOO_LARGE: 1009; SUPERSEDED: 4001; TASK_ENDED: 4002; TOKEN_EXPIRED: 4003 }>;
export function unsafeReason(value: string): string | null;
export function validateAction(action: unknown, views: RegisteredView[]): string | null;
export function targetHolds(action: { type: ActionType } & Record<string, unknown>, view: ViewState): boolean;
export function connectGateway(options: ConnectOptions): Promise<GatewaySession>;
