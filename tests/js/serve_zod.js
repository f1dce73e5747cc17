// serve_zod.js — structured outputs as the official OpenAI JavaScript
// client writes them from a zod schema (openai/helpers/zod's
// zodResponseFormat: pattern, format, multipleOf, bounds, OpenAPI's
// nullable) and parses them (chat.completions.parse, which validates the
// reply with zod itself), against a running gcore-serve, for
// tests/test_serve.py:
//   node serve_zod.js BASE_URL MODEL N
// Prints one JSON object: the schema the client sent, and for each of N
// seeds the reply's content, its finish_reason and either the parsed
// object or the client's error.
const { OpenAI } = require("openai");
const { z } = require("zod");
const { zodResponseFormat } = require("openai/helpers/zod");

const Event = z.object({
  code: z.string().regex(/^[A-Z]{3}-\d{2}$/),
  day: z.string().date(),
  when: z.string().datetime({ offset: true }),
  id: z.string().uuid(),
  mail: z.string().email().max(24),
  ip: z.string().ip({ version: "v4" }),
  kind: z.enum(["talk", "party"]),
  seats: z.number().int().min(1).max(9),
  price: z.number().multipleOf(0.25).min(0).max(100),
  title: z.string().max(12),
  note: z.string().max(8).nullable(),
  open: z.boolean().nullable(),
  level: z.enum(["low", "high"]).nullable(),
});

async function main() {
  const [base, model, n] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: base, apiKey: "none", maxRetries: 0, timeout: 120000 });
  const format = zodResponseFormat(Event, "event");
  const out = { schema: format.json_schema.schema, replies: [] };
  for (let seed = 0; seed < Number(n); seed++) {
    const reply = { seed };
    const body = {
      model, messages: [{ role: "user", content: `Plan event ${seed}` }], max_tokens: 900,
      temperature: seed % 2 ? 1.0 : 0, seed, response_format: format,
    };
    try {
      const c = await client.chat.completions.parse(body);
      const ch = c.choices[0];
      Object.assign(reply, { content: ch.message.content, finish: ch.finish_reason, parsed: ch.message.parsed });
    } catch (e) {
      reply.error = { name: e.constructor.name, message: String(e.message).slice(0, 400) };
      const raw = await client.chat.completions.create(body); /* the same reply, unparsed: what zod refused */
      reply.content = raw.choices[0].message.content;
    }
    out.replies.push(reply);
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
