// webmcp-tools.js: the task's tool catalog registered as WebMCP tools with the page's model
// context (document.modelContext or navigator.modelContext), so a browser agent can call
// them; each call goes to the gateway through the tab channel, `via: "webmcp"`.

function modelContext() {
  return (globalThis.document && globalThis.document.modelContext) || (globalThis.navigator && globalThis.navigator.modelContext) || null;
}

/**
 * One page's registrations. `call(tool, input, options)` is the session's tool call;
 * `emit(type, detail)` tells the page of a refused registration or a failed call.
 */
export class WebMCPTools {
  #enabled;
  #call;
  #emit;
  #registration = null; // AbortController of the current registrations
  #registered = ""; // the catalog they were made from, as JSON

  constructor({ enabled, call, emit }) {
    this.#enabled = enabled;
    this.#call = call;
    this.#emit = emit;
  }

  /** Register `tools` (the catalog from `welcome`), unless the same catalog already is. */
  register(tools) {
    const mc = modelContext();
    if (!this.#enabled || !mc || typeof mc.registerTool !== "function") return;
    const signature = JSON.stringify(tools);
    if (this.#registration && signature === this.#registered) return;
    this.withdraw();
    const controller = new AbortController();
    this.#registration = controller;
    this.#registered = signature;
    for (const tool of tools) {
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
        execute: (input, client) => this.#execute(tool.name, input, client && client.signal),
      };
      try {
        const registered = mc.registerTool(definition, { signal: controller.signal });
        // registerTool returns a promise that rejects when the registration is withdrawn
        // (our own abort, expected) or refused (a frame the `tools` permissions policy does
        // not allow), which the page should hear of.
        if (registered && typeof registered.catch === "function") {
          registered.catch((error) => {
            if (controller.signal.aborted) return;
            this.#emit("error", { code: "webmcp_register_failed", message: String(error && error.message), tool: tool.name });
          });
        }
      } catch (error) {
        this.#emit("error", { code: "webmcp_register_failed", message: String(error && error.message), tool: tool.name });
      }
    }
  }

  /** Withdraw every registration (the channel ended, or the catalog changed). */
  withdraw() {
    if (this.#registration) {
      this.#registration.abort(new DOMException("the tab channel ended", "AbortError"));
      this.#registration = null;
      this.#registered = "";
    }
  }

  async #execute(name, input, signal) {
    const args = typeof input === "string" ? JSON.parse(input || "{}") : input ?? {};
    const result = await this.#call(name, args, { signal, via: "webmcp" });
    if (result.status !== "succeeded") {
      const error = result.error || {};
      const message = `${result.status} ${error.code || "error"}: ${error.message || ""}`;
      this.#emit("toolerror", { tool: name, message, result });
      throw new Error(message);
    }
    return result.output === undefined ? null : result.output;
  }
}
