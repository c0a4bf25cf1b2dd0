// `monarch-pdb dap` driven by Microsoft's own DAP test client (the one VS Code's adapters are
// tested with), on the guide's program with 16 ranks: what a user does in the editor.
'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const { DebugClient } = require('@vscode/debugadapter-testsupport');
const cp = require('node:child_process');
const { Events, Job, MONARCH_PDB, PYTHON, ROOT } = require('./job');

const EXAMPLE = `${ROOT}/examples/debugging.py`;
const RUNS_ON = `${__dirname}/runs_on.py`;
const PAUSED = `${__dirname}/paused.py`;

const LOOPS = `
import time
from monarch_pdb.actor import Actor, current_rank, endpoint, this_host

def visit(rank, round):
    return rank + round

class Looper(Actor):
    @endpoint
    def work(self):
        breakpoint()
        round = 0
        while True:
            round += 1
            visit(current_rank().rank, round)
            time.sleep(0.01)

if __name__ == "__main__":
    this_host().spawn_procs(per_host={"gpu": 4}).spawn("looper", Looper).work.call().get()
`;
const VISIT_LINE = 6;
const MONITORING = cp.spawnSync(PYTHON, ['-c', 'import sys; print(sys.version_info >= (3, 12))'],
  { encoding: 'utf8' }).stdout.trim() === 'True';

async function attached(job) {
  const dc = new DebugClient(MONARCH_PDB, 'dap', 'monarch-pdb', { env: job.env });
  job.adapter = dc;
  dc.defaultTimeout = 60000;
  const events = new Events(dc, ['initialized', 'stopped', 'thread', 'output']);
  await dc.start();
  await dc.initializeRequest({ adapterID: 'monarch-pdb', linesStartAt1: true, columnsStartAt1: true });
  await dc.attachRequest({});
  await events.take('initialized');
  await dc.configurationDoneRequest();
  return { dc, events };
}

async function threadsByRank(dc) {
  const { body } = await dc.threadsRequest();
  return new Map(body.threads.map((t) => [Number(t.name.split(' · ')[0].split(' ')[1]), t.id]));
}

async function topLine(dc, threadId) {
  const { body } = await dc.stackTraceRequest({ threadId, startFrame: 0, levels: 1 });
  return body.stackFrames[0].line;
}

test('16 ranks are 16 threads: step one, break them all, continue all, post-mortem, disconnect', { timeout: 300000 }, async () => {
  const job = new Job();
  try {
    job.run(EXAMPLE);
    job.waitFor('debugee', 16);
    const { dc, events } = await attached(job);

    const entries = await events.take('stopped', 16, (e) => e.body.reason === 'entry');
    assert.ok(entries.every((e) => e.body.allThreadsStopped === false));
    const byRank = await threadsByRank(dc);
    assert.deepEqual([...byRank.keys()].sort((a, b) => a - b), [...Array(16).keys()]);

    const thread = byRank.get(5);
    const trace = (await dc.stackTraceRequest({ threadId: thread })).body;
    assert.equal(trace.stackFrames[0].name, '_debugee_actor_internal');
    assert.equal(trace.stackFrames[0].source.path, EXAMPLE);
    const scopes = (await dc.scopesRequest({ frameId: trace.stackFrames[0].id })).body.scopes;
    assert.deepEqual(scopes.map((s) => s.name), ['Locals', 'Globals']);
    const locals = (await dc.variablesRequest({ variablesReference: scopes[0].variablesReference })).body.variables;
    assert.equal(locals.find((v) => v.name === 'rank').value, '5');
    const watch = await dc.evaluateRequest({ expression: 'rank * 3', frameId: trace.stackFrames[0].id, context: 'watch' });
    assert.equal(watch.body.result, '15');

    const before = new Map();
    for (const [rank, id] of byRank) before.set(rank, await topLine(dc, id));
    await dc.nextRequest({ threadId: byRank.get(4) });
    const step = await events.take('stopped', 1, (e) => e.body.reason === 'step');
    assert.equal(step[0].body.threadId, byRank.get(4));
    for (const [rank, id] of byRank) {
      assert.equal(await topLine(dc, id), before.get(rank) + (rank === 4 ? 1 : 0), `rank ${rank}`);
    }

    const set = await dc.setBreakpointsRequest({ source: { path: EXAMPLE },
      breakpoints: [{ line: 12 }, { line: 16 }, { line: 20 }, { line: 24 }] });
    assert.ok(set.body.breakpoints.every((b) => b.verified));
    const go = await dc.continueRequest({ threadId: byRank.get(0) });
    assert.equal(go.body.allThreadsContinued, true);
    // Every rank stops at the line it reaches, but one that stood on such a line already: rank 4,
    // one line after its stop, stands on line 12 where Python stops after breakpoint(), and
    // returns; from 3.14, which stops at the call, it is on line 11 and stops too.
    const fourReturns = before.get(4) + 1 === 12;
    const stopping = [...byRank].filter(([rank]) => rank !== 4 || !fourReturns).map(([, id]) => id);
    const hits = await events.take('stopped', stopping.length, (e) => e.body.reason === 'breakpoint');
    assert.deepEqual(new Set(hits.map((e) => e.body.threadId)), new Set(stopping));
    if (fourReturns) {
      await events.take('thread', 1, (e) => e.body.reason === 'exited' && e.body.threadId === byRank.get(4));
    }

    await dc.continueRequest({ threadId: byRank.get(0) });
    const raised = await events.take('stopped', 4, (e) => e.body.reason === 'exception');
    assert.deepEqual(new Set(raised.map((e) => e.body.threadId)), new Set([2, 6, 10, 14].map((r) => byRank.get(r))));
    const info = await dc.exceptionInfoRequest({ threadId: byRank.get(6) });
    assert.equal(info.body.exceptionId, 'ValueError');
    assert.equal(info.body.description, 'bad rank');

    await dc.disconnectRequest({});
    job.waitFor('debugee', 4);
    assert.equal(job.list().length, 4, 'the post-mortem ranks stay paused for the shell');
  } finally {
    job.end();
  }
});

test('pause stops a running rank', { timeout: 180000 }, async () => {
  const job = new Job();
  try {
    job.run(RUNS_ON);
    job.waitFor('worker', 2);
    const { dc, events } = await attached(job);
    const byRank = await threadsByRank(dc);
    await dc.continueRequest({ threadId: byRank.get(0) });
    await events.take('thread', 1, (e) => e.body.reason === 'exited' && e.body.threadId === byRank.get(0));
    await dc.pauseRequest({ threadId: byRank.get(1) });
    const paused = await events.take('stopped', 1, (e) => e.body.reason === 'pause');
    assert.equal(paused[0].body.threadId, byRank.get(1));
    await dc.disconnectRequest({});
  } finally {
    job.end();
  }
});

test('a breakpoint set while ranks run stops them all', { timeout: 180000,
  skip: !MONITORING && 'a running rank stops at a breakpoint from Python 3.12 on (sys.monitoring)' }, async () => {
  const job = new Job();
  try {
    job.write('loops.py', LOOPS);
    job.run(`${job.dir}/loops.py`);
    job.waitFor('looper', 4);
    const { dc, events } = await attached(job);
    await events.take('stopped', 4, (e) => e.body.reason === 'entry');
    const byRank = await threadsByRank(dc);
    await dc.continueRequest({ threadId: byRank.get(0) });
    const set = await dc.setBreakpointsRequest({ source: { path: `${job.dir}/loops.py` },
      breakpoints: [{ line: VISIT_LINE }] });
    assert.deepEqual(set.body.breakpoints.map(({ id, ...shown }) => shown), [{ verified: true, line: VISIT_LINE }]);
    const hits = await events.take('stopped', 4, (e) => e.body.reason === 'breakpoint');
    assert.deepEqual(new Set(hits.map((e) => e.body.threadId)), new Set(byRank.values()));
    for (const id of byRank.values()) assert.equal(await topLine(dc, id), VISIT_LINE);
    await dc.disconnectRequest({});
  } finally {
    job.end();
  }
});

test('1,024 paused ranks answer threads in under 100 ms', { timeout: 300000 }, async () => {
  const job = new Job();
  try {
    job.run(PAUSED, '1024');
    job.waitFor('emu', 1024);
    const { dc, events } = await attached(job);
    await events.take('stopped', 1024, (e) => e.body.reason === 'entry');
    const times = [];
    for (let i = 0; i < 5; i++) {
      const start = process.hrtime.bigint();
      const { body } = await dc.threadsRequest();
      times.push(Number(process.hrtime.bigint() - start) / 1e6);
      assert.equal(body.threads.length, 1024);
    }
    // The fastest of five: what the adapter costs, whatever else the machine runs meanwhile.
    assert.ok(Math.min(...times) < 100, `threads took ${times.map((t) => t.toFixed(1)).join(', ')} ms`);
    console.log(`threads of 1,024 paused ranks: ${times.map((t) => t.toFixed(1)).join(', ')} ms`);
    await dc.disconnectRequest({});
  } finally {
    job.end();
  }
});
