// serve_client.js — the official OpenAI JavaScript client (npm `openai`)
// against a running gcore-serve, for tests/test_serve.py:
//   node serve_client.js BASE_URL MODEL SPEC_JSON
// SPEC_JSON: {"chat": [messages...], "prompt": "text", "max_tokens": N}.
// Prints one JSON object: the text and token ids of a chat completion and
// of a completion, each without and with stream: true, and what the
// client makes of an error (a model the server does not have).
const { OpenAI } = require("openai");

async function main() {
  const [base, model, specText] = process.argv.slice(2);
  const spec = JSON.parse(specText);
  const client = new OpenAI({ baseURL: base, apiKey: "none", maxRetries: 0, timeout: 60000 });
  const common = { model, max_tokens: spec.max_tokens, temperature: 0, return_token_ids: true };
  const out = {};

  const chat = await client.chat.completions.create({ ...common, messages: spec.chat });
  out.chat = {
    text: chat.choices[0].message.content, ids: chat.choices[0].token_ids,
    finish: chat.choices[0].finish_reason, usage: chat.usage, object: chat.object,
  };

  const chatStream = await client.chat.completions.create({
    ...common, messages: spec.chat, stream: true, stream_options: { include_usage: true },
  });
  let text = "", ids = [], finish = null, usage = null, roles = [];
  for await (const chunk of chatStream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) roles.push(c.delta.role);
      if (c.delta.content) text += c.delta.content;
      if (c.token_ids) ids = ids.concat(c.token_ids);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  out.chat_stream = { text, ids, finish, usage, roles };

  const cmpl = await client.completions.create({ ...common, prompt: spec.prompt });
  out.completion = { text: cmpl.choices[0].text, ids: cmpl.choices[0].token_ids, finish: cmpl.choices[0].finish_reason };

  const cmplStream = await client.completions.create({ ...common, prompt: spec.prompt, stream: true });
  text = ""; ids = []; finish = null;
  for await (const chunk of cmplStream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.token_ids) ids = ids.concat(c.token_ids);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  out.completion_stream = { text, ids, finish };

  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  try {
    await client.chat.completions.create({ ...common, model: "no-such-model", messages: spec.chat });
    out.error = null;
  } catch (e) {
    out.error = { status: e.status, type: e.type, code: e.code, param: e.param, message: e.message };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stderr.write(`serve_client.js: ${e.stack || e}\n`);
  process.exit(1);
});
