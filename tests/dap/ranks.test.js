// The extension's Ranks view as the adapter feeds it, through Microsoft's DAP test client: the
// groups and merged stacks made into the view's items (editors/vscode/ranks_model.js), a group's
// continue, and a launch configuration's job ended with the session.
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { test } = require('node:test');
const { DebugClient } = require('@vscode/debugadapter-testsupport');
const { Events, Job, MONARCH_PDB, PYTHON, ROOT } = require('./job');
const { roots, action } = require('../../editors/vscode/ranks_model');

const EXAMPLE = `${ROOT}/examples/debugging.py`;

async function started(job, request, args) {
  const dc = new DebugClient(MONARCH_PDB, 'dap', 'monarch-pdb', { env: job.env });
  job.adapter = dc;
  dc.defaultTimeout = 60000;
  const events = new Events(dc, ['initialized', 'stopped', 'thread', 'output', 'monarchRanksChanged', 'terminated']);
  await dc.start();
  await dc.initializeRequest({ adapterID: 'monarch-pdb', linesStartAt1: true, columnsStartAt1: true });
  await (request === 'launch' ? dc.launchRequest(args) : dc.attachRequest(args));
  await events.take('initialized');
  await dc.configurationDoneRequest();
  return { dc, events };
}

test('the Ranks view: four groups of four, the merged stacks, and one group continued', { timeout: 300000 }, async () => {
  const job = new Job();
  try {
    job.run(EXAMPLE);
    job.waitFor('debugee', 16);
    const { dc, events } = await started(job, 'attach', {});
    await events.take('stopped', 16, (e) => e.body.reason === 'entry');

    const [groups, stacks] = roots((await dc.customRequest('monarchRanks', { stacks: true })).body);
    assert.equal(groups.label, 'Groups');
    assert.equal(groups.description, '16 ranks');
    assert.deepEqual(groups.children.map((g) => g.label).sort(),
      ['debugee ranks[0,4,8,12] (4)', 'debugee ranks[1,5,9,13] (4)', 'debugee ranks[2,6,10,14] (4)',
        'debugee ranks[3,7,11,15] (4)']);
    assert.ok(groups.children.every((g) => /^debugging\._debugee_actor_internal:\d+ · breakpoint · /.test(g.description)),
      groups.children.map((g) => g.description).join('\n'));
    assert.ok(groups.children.every((g) => g.threadId > 0));
    assert.equal(stacks.children[0].label, 'debugee ranks[0-15] (16)');

    const first = groups.children.find((g) => g.label.startsWith('debugee ranks[0,'));
    await dc.customRequest('monarchFocus', { threadId: first.threadId });
    const focus = (await events.take('stopped', 1, (e) => e.body.threadId === first.threadId))[0].body;
    assert.equal(focus.preserveFocusHint, undefined, 'selecting a group shows its first thread');
    await dc.customRequest('monarchRanksAct', action(first, 'continue'));
    await events.take('thread', 4, (e) => e.body.reason === 'exited');
    await events.take('monarchRanksChanged');
    const after = roots((await dc.customRequest('monarchRanks', {})).body)[0].children;
    const done = after.find((g) => g.label === 'debugee ranks[0,4,8,12] (4)');
    assert.match(done.description, /^finished · /, 'the continued group\'s ranks finished');
    assert.equal(done.threadId, 0, 'and have no thread');
    assert.equal(after.filter((g) => / · breakpoint · /.test(g.description)).length, 3);
  } finally {
    job.end();
  }
});

test('launch runs the job\'s command with a broker of its own; disconnect ends it all', { timeout: 300000 }, async () => {
  const job = new Job();
  try {
    const { dc, events } = await started(job, 'launch', { command: [PYTHON, EXAMPLE], cwd: ROOT });
    await events.take('stopped', 16, (e) => e.body.reason === 'breakpoint');
    const { body } = await dc.threadsRequest();
    assert.equal(body.threads.length, 16);
    const run = job.env.MONARCH_PDB_RUNTIME_DIR;
    const launchDirs = () => (fs.existsSync(run) ? fs.readdirSync(run).filter((f) => f.startsWith('launch-')) : []);
    assert.equal(launchDirs().length, 1, 'its broker\'s files are in a directory of their own');
    const broker = JSON.parse(fs.readFileSync(path.join(run, launchDirs()[0], 'broker-0.json'))).pid;
    await dc.disconnectRequest({});
    job.adapter = null;
    await new Promise((resolve) => { dc._adapterProcess ? dc._adapterProcess.once('exit', resolve) : resolve(); });
    assert.deepEqual(launchDirs(), [], 'the broker\'s directory is gone');
    assert.throws(() => process.kill(broker, 0), /ESRCH/, 'the broker ended');
  } finally {
    job.end();
  }
});
