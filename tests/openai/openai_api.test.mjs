// The router's OpenAI-compatible HTTP API driven by the official `openai` client, against a live
// cluster (tests/openai/run_openai_test.sh starts it on the embedded pack). Every method's output
// at T=0 is compared with the router's own gRPC Generate for the same prompt tokens, streamed and
// not, for completions and chat; a stream aborted mid-way must free the target's KV handles.
//
// Environment: SPECDEC_HTTP_URL, SPECDEC_GRPC_ADDR, SPECDEC_PROTO_DIR, SPECDEC_TARGET_METRICS.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import path from 'node:path';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const HTTP = env('SPECDEC_HTTP_URL');
const GRPC = env('SPECDEC_GRPC_ADDR');
const PROTO_DIR = env('SPECDEC_PROTO_DIR');
const TARGET_METRICS = env('SPECDEC_TARGET_METRICS');
const ROUTER_METRICS = env('SPECDEC_ROUTER_METRICS');

const METHODS = ['AR', 'DRAFT_CHAIN', 'DYSPEC_TREE', 'DFLASH', 'DFLASH_ADAPTIVE', 'NGRAM'];
const PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n';
const TOKENS = 24;

const client = new OpenAI({ baseURL: `${HTTP}/v1`, apiKey: 'unused', maxRetries: 0 });

const definition = protoLoader.loadSync(path.join(PROTO_DIR, 'specdec/v1/router.proto'), {
  includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: true,
  oneofs: true,
});
const Router = grpc.loadPackageDefinition(definition).specdec.v1.Router;
const router = new Router(GRPC, grpc.credentials.createInsecure());

// gRPC Generate: the completion's token ids and text.
function generate(request) {
  return new Promise((resolve, reject) => {
    const ids = [];
    let text = '';
    const call = router.Generate({ return_text: true, ignore_eos: true,
                                   max_new_tokens: TOKENS, ...request });
    call.on('data', (r) => {
      if (r.chunk && !r.chunk.prompt) {
        ids.push(...r.chunk.token_ids);
        text += r.chunk.text;
      }
    });
    call.on('error', reject);
    call.on('end', () => resolve({ ids, text }));
  });
}

const greedy = (method) => ({
  temperature: 0, ignore_eos: true, max_tokens: TOKENS, speculative: { method },
});

async function collect(stream, chat) {
  let text = '';
  const ids = [];
  let finish = null;
  let usage = null;
  let stats = null;
  for await (const chunk of stream) {
    if (chunk.usage) {
      usage = chunk.usage;
      stats = chunk.specdec;
    }
    for (const c of chunk.choices) {
      text += chat ? (c.delta.content ?? '') : c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.choices.length && chunk.specdec?.token_ids) ids.push(...chunk.specdec.token_ids);
  }
  return { text, ids, finish, usage, stats };
}

// The value of the first sample whose line starts with `prefix` (0 when there is none).
async function sample(url, prefix) {
  const body = await (await fetch(url)).text();
  const line = body.split('\n').find((l) => l.startsWith(prefix));
  return line ? Number(line.split(' ').pop()) : 0;
}
const kvHandles = () => sample(TARGET_METRICS, 'specdec_kv_handles');
const cancelledRequests = () => sample(ROUTER_METRICS, 'specdec_requests_total{code="CANCELLED"}');

test('GET /v1/models lists the served model', async () => {
  const models = await client.models.list();
  assert.ok(models.data.length >= 1);
  assert.equal(models.data[0].object, 'model');
});

for (const method of METHODS) {
  test(`completions, ${method}: streamed and whole equal gRPC Generate at T=0`, async () => {
    const whole = await client.completions.create({
      model: (await client.models.list()).data[0].id, prompt: PROMPT, return_token_ids: true,
      ...greedy(method),
    });
    const expected = await generate({ token_ids: { ids: whole.specdec.prompt_token_ids },
                                      method, sampling: { temperature: 0 } });
    assert.equal(expected.ids.length, TOKENS);
    assert.deepEqual(whole.specdec.token_ids, expected.ids);
    assert.equal(whole.choices[0].text, expected.text);
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(whole.usage.completion_tokens, TOKENS);
    assert.equal(whole.usage.prompt_tokens, whole.specdec.prompt_token_ids.length);
    assert.equal(whole.specdec.method, method === 'DFLASH_ADAPTIVE' ? 'DFLASH_ADAPTIVE' : method);

    const streamed = await collect(await client.completions.create({
      model: whole.model, prompt: PROMPT, stream: true, stream_options: { include_usage: true },
      ...greedy(method),
    }), false);
    assert.equal(streamed.text, expected.text);
    assert.deepEqual(streamed.ids, expected.ids);
    assert.equal(streamed.finish, 'length');
    assert.equal(streamed.usage.completion_tokens, TOKENS);
    assert.equal(streamed.stats.method, method);
    assert.ok(streamed.stats.tau >= 1, `tau ${streamed.stats.tau}`);
  });

  test(`chat, ${method}: streamed and whole equal gRPC Generate at T=0`, async () => {
    const messages = [
      { role: 'system', content: 'You write Python.' },
      { role: 'user', content: [{ type: 'text', text: 'Write fibonacci.' }] },
    ];
    const whole = await client.chat.completions.create({
      model: 'target', messages, return_token_ids: true, ...greedy(method),
    });
    const expected = await generate({ token_ids: { ids: whole.specdec.prompt_token_ids },
                                      method, sampling: { temperature: 0 } });
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.equal(whole.choices[0].message.content, expected.text);
    assert.deepEqual(whole.specdec.token_ids, expected.ids);

    const streamed = await collect(await client.chat.completions.create({
      model: 'target', messages, stream: true, stream_options: { include_usage: true },
      ...greedy(method),
    }), true);
    assert.equal(streamed.text, expected.text);
    assert.deepEqual(streamed.ids, expected.ids);
    assert.equal(streamed.usage.prompt_tokens, whole.usage.prompt_tokens);
  });
}

test('a stop string ends the completion with finish_reason "stop"', async () => {
  const base = await client.completions.create({ model: 'target', prompt: PROMPT,
                                                 ...greedy('AR') });
  const text = base.choices[0].text;
  const stop = text.trim().slice(0, 3);
  assert.ok(stop.length > 0, 'the completion has text to stop on');
  const stopped = await client.completions.create({ model: 'target', prompt: PROMPT, stop: [stop],
                                                    ...greedy('DFLASH') });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.ok(!stopped.choices[0].text.includes(stop));
  assert.ok(text.startsWith(stopped.choices[0].text));
});

test('errors come back in OpenAI\'s shape with their HTTP status', async () => {
  await assert.rejects(
    client.completions.create({ model: 'target', prompt: PROMPT, temperature: 'hot' }),
    (e) => e.status === 400 && e.error?.param === 'temperature' &&
           /must be a number/.test(e.message));
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: PROMPT, max_tokens: 4 }),
    (e) => e instanceof OpenAI.NotFoundError && /no-such-model/.test(e.message));
  await assert.rejects(
    client.completions.create({ model: 'target', prompt: PROMPT, n: 2 }),
    (e) => e.status === 400 && e.error?.param === 'n');
});

test('aborting a stream mid-way cancels the request and frees its KV handles', async () => {
  // The earlier tests' requests have ended; their streams' handles are freed just after (a
  // slower build, such as the sanitizers', takes longer).
  let before = await kvHandles();
  for (const until = Date.now() + 5000; before !== 0 && Date.now() < until;) {
    await new Promise((r) => setTimeout(r, 50));
    before = await kvHandles();
  }
  assert.equal(before, 0, 'no handle is held before the test');
  const cancelledBefore = await cancelledRequests();
  const stream = await client.completions.create({
    model: 'target', prompt: PROMPT, stream: true, temperature: 0, ignore_eos: true,
    max_tokens: 1500, speculative: { method: 'AR' },
  });
  let chunks = 0;
  let held = 0;
  for await (const chunk of stream) {
    if (++chunks === 4) {
      held = await kvHandles();
      stream.controller.abort();
      break;
    }
  }
  assert.ok(held >= 1, `the running request held ${held} handles`);
  // Without the cancel the request would run on for its 1500 tokens, holding its handle.
  const deadline = Date.now() + 10000;
  let now = held;
  let cancelled = cancelledBefore;
  while (Date.now() < deadline) {
    now = await kvHandles();
    cancelled = await cancelledRequests();
    if (now === 0 && cancelled > cancelledBefore) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(now, 0, 'the target freed the aborted request\'s handles');
  assert.equal(cancelled, cancelledBefore + 1, 'the router counted the request as cancelled');
});
