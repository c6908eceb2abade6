// An agent written with the official TypeScript MCP SDK client, as an app team would write
// one, run by the test suite against a live gateway. One scenario per run; it prints one
// JSON object on stdout and exits 0 unless the scenario itself could not run.
//
//   node ts_agent.mjs '{"url": ".../v1/mcp", "token": "...", "scenario": "list"}'

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const plan = JSON.parse(process.argv[2]);

async function connected() {
  const transport = new StreamableHTTPClientTransport(new URL(plan.url), {
    requestInit: { headers: { Authorization: `Bearer ${plan.token}` } },
  });
  const client = new Client({ name: "gateway-tests-ts-agent", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

function summary(result) {
  return {
    isError: Boolean(result.isError),
    structured: result.structuredContent ?? null,
    content: result.content.map((block) =>
      block.type === "image"
        ? { type: "image", mimeType: block.mimeType, bytes: Buffer.from(block.data, "base64").length,
            size: pngSize(Buffer.from(block.data, "base64")) }
        : block.type === "resource_link"
          ? { type: block.type, uri: block.uri, mimeType: block.mimeType, size: block.size }
          : { type: block.type, text: block.text ?? null },
    ),
  };
}

function pngSize(bytes) {
  const signature = "89504e470d0a1a0a";
  if (bytes.length < 24 || bytes.subarray(0, 8).toString("hex") !== signature) return null;
  return [bytes.readUInt32BE(16), bytes.readUInt32BE(20)];
}

function failure(e) {
  return { error: String(e && e.message ? e.message : e), code: e && e.code !== undefined ? e.code : null };
}

// One task operation (the SDK's experimental tasks API), as its answer or its error.
async function taskOp(client, op, taskId) {
  try {
    if (op === "get") return { task: await client.experimental.tasks.getTask(taskId) };
    if (op === "result") {
      const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
      return { ...summary(result), meta: result._meta ?? null };
    }
    if (op === "list") return { tasks: (await client.experimental.tasks.listTasks()).tasks };
    if (op === "cancel") return { task: await client.experimental.tasks.cancelTask(taskId) };
    return { error: `unknown op ${op}` };
  } catch (e) {
    return failure(e);
  }
}

const scenarios = {
  async list() {
    const client = await connected();
    const { tools } = await client.listTools();
    await client.close();
    return { names: tools.map((t) => t.name) };
  },
  async call() {
    const client = await connected();
    const result = await client.callTool({ name: plan.tool, arguments: plan.arguments ?? {} });
    await client.close();
    return summary(result);
  },
  async progress() {
    const client = await connected();
    const seen = [];
    const result = await client.callTool(
      { name: plan.tool, arguments: plan.arguments ?? {} },
      undefined,
      { onprogress: (p) => seen.push(p), resetTimeoutOnProgress: true },
    );
    await client.close();
    return { progress: seen, ...summary(result) };
  },
  async cancel() {
    const client = await connected();
    const abort = new AbortController();
    setTimeout(() => abort.abort("the test cancels"), plan.after_ms ?? 1000);
    let error = null;
    try {
      await client.callTool({ name: plan.tool, arguments: {} }, undefined, { signal: abort.signal });
    } catch (e) {
      error = String(e && e.message ? e.message : e);
    }
    // Let the cancellation notification go out before the connection closes.
    await new Promise((r) => setTimeout(r, 300));
    await client.close();
    return { error };
  },
  async logs() {
    const client = await connected();
    const messages = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => messages.push(n.params));
    await client.setLoggingLevel(plan.level ?? "info");
    const result = await client.callTool({ name: plan.tool, arguments: plan.arguments ?? {} });
    await new Promise((r) => setTimeout(r, plan.wait_ms ?? 1500));
    await client.close();
    return { messages, ...summary(result) };
  },
  async resources() {
    const client = await connected();
    const listed = await client.listResources();
    const read = [];
    for (const resource of listed.resources) {
      const got = await client.readResource({ uri: resource.uri });
      for (const c of got.contents) {
        read.push({
          uri: c.uri,
          mimeType: c.mimeType,
          text: c.text ?? null,
          blobBytes: c.blob ? Buffer.from(c.blob, "base64").length : null,
        });
      }
    }
    let foreign = null;
    if (plan.foreign_uri) {
      try {
        await client.readResource({ uri: plan.foreign_uri });
        foreign = "read";
      } catch (e) {
        foreign = String(e && e.message ? e.message : e);
      }
    }
    await client.close();
    return { resources: listed.resources, read, foreign };
  },
  async task_call() {
    // The SDK runs a tool its listing marks as task-capable as a task, and polls it.
    const client = await connected();
    const { tools } = await client.listTools();
    const events = [];
    let taskId = null;
    let result = null;
    for await (const message of client.experimental.tasks.callToolStream(
      { name: plan.tool, arguments: plan.arguments ?? {} },
      CallToolResultSchema,
    )) {
      if (message.type === "taskCreated") taskId = message.task.taskId;
      if (message.type === "taskCreated" || message.type === "taskStatus") {
        events.push({ type: message.type, status: message.task.status,
                      statusMessage: message.task.statusMessage ?? null });
      } else if (message.type === "result") {
        events.push({ type: "result" });
        result = { ...summary(message.result), meta: message.result._meta ?? null };
      } else {
        events.push({ type: message.type, error: String(message.error) });
      }
    }
    // A failed task's result is read as its own request (the stream gives only an error).
    const read = taskId && !result ? await taskOp(client, "result", taskId) : null;
    await client.close();
    const execution = Object.fromEntries(tools.map((t) => [t.name, t.execution ?? null]));
    return { taskId, events, result: result ?? read, execution };
  },
  async task_start() {
    // Start the call as a task and stop at its creation; other runs read and cancel it.
    const client = await connected();
    await client.listTools();
    let created = null;
    for await (const message of client.experimental.tasks.callToolStream(
      { name: plan.tool, arguments: plan.arguments ?? {} },
      CallToolResultSchema,
      { task: plan.ttl ? { ttl: plan.ttl } : {} },
    )) {
      if (message.type === "taskCreated") {
        created = message.task;
        break;
      }
      if (message.type === "error") {
        created = failure(message.error);
        break;
      }
    }
    await client.close();
    return { task: created };
  },
  async task_ops() {
    const client = await connected();
    const out = {};
    for (const op of plan.ops) out[op] = await taskOp(client, op, plan.task_id);
    await client.close();
    return out;
  },
  async reconnect() {
    // close() sends no DELETE: each round leaves its session behind, as real agents do.
    const rounds = [];
    for (let i = 0; i < plan.times; i++) {
      try {
        const client = await connected();
        const result = await client.callTool({ name: plan.tool, arguments: {} });
        rounds.push(result.isError ? "error" : "ok");
        await client.close();
      } catch (e) {
        rounds.push(`failed: ${String(e && e.message ? e.message : e).slice(0, 200)}`);
      }
    }
    return { rounds };
  },
};

try {
  const out = await scenarios[plan.scenario]();
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
} catch (e) {
  process.stdout.write(JSON.stringify({ crashed: String(e && e.stack ? e.stack : e) }) + "\n");
  process.exit(1);
}
