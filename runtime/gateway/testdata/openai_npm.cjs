// Drives PicoBot's OpenAI-compatible endpoint with the official openai npm
// client (TestOpenAINPMClient runs it): retries with an idempotency key,
// a stream across a slow step, a stateless history, and client tools,
// by hand and through the client's own runTools helper. It prints one JSON
// object of what it saw; the Go test checks it against the fake model.
'use strict';

const { OpenAI } = require(process.env.OPENAI_MODULE);

async function main() {
  const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0 });
  const out = {};

  // 1. Retries: the first attempt times out while the model is slow; the
  // client retries (timeouts and 409 busy are retried) with the same
  // Idempotency-Key and gets the one turn's answer.
  // The answer comes either to a retry that waited for the turn, or as the
  // stored answer (Idempotent-Replayed) to one that came after it.
  let attempts = 0;
  const retrying = new OpenAI({
    baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 8, timeout: 700,
    fetch: (url, init) => { attempts++; return fetch(url, init); },
  });
  const { data: booked, response } = await retrying.chat.completions
    .create({ model: 'assistant', user: 'npm-retry', messages: [{ role: 'user', content: 'book it' }] },
      { headers: { 'Idempotency-Key': 'npm-order-1' } })
    .withResponse();
  out.retry = { text: booked.choices[0].message.content, attempts, replayed: response.headers.get('idempotent-replayed') || '' };

  // 2. A stream across a tool call and a slow step.
  const stream = await client.chat.completions.create({
    model: 'assistant', user: 'npm-stream', stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: '6*7?' }],
  });
  const chunks = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    chunks.push(c ? { role: c.delta.role || '', content: c.delta.content || '', finish: c.finish_reason || '' } : { usage: chunk.usage.total_tokens });
  }
  out.stream = chunks;

  // 3. A stateless history: no user, prior turns.
  const hist = await client.chat.completions.create({
    model: 'assistant',
    messages: [
      { role: 'system', content: 'Answer in French.' },
      { role: 'user', content: 'Hello?' }, { role: 'assistant', content: 'Hi.' },
      { role: 'user', content: 'Say hello.' },
    ],
  });
  out.stateless = hist.choices[0].message.content;

  // 4. A client tool by hand: the call comes back, the client answers it.
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const first = await client.chat.completions.create({ model: 'assistant', messages, tools });
  const call = first.choices[0].message.tool_calls[0];
  messages.push(first.choices[0].message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: 'sunny, ' + JSON.parse(call.function.arguments).city });
  const second = await client.chat.completions.create({ model: 'assistant', messages, tools });
  out.clientTool = { finish: first.choices[0].finish_reason, name: call.function.name, args: call.function.arguments,
    answer: second.choices[0].message.content };

  // 5. The client's runTools helper, streaming: it runs the tool itself
  // and sends the follow-up.
  const ran = [];
  const runner = client.chat.completions.runTools({
    model: 'assistant', stream: true, messages: [{ role: 'user', content: 'Weather in Rome?' }],
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: tools[0].function.parameters, parse: JSON.parse,
      function: (args) => { ran.push(args.city); return 'rainy, ' + args.city; } } }],
  });
  out.runTools = { answer: await runner.finalContent(), ran };

  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
