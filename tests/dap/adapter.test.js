// Where the VS Code extension finds `monarch-pdb`, on a workspace laid out on disk as users have
// it: the Python extension's interpreter, else the workspace's .venv or venv, else PATH; and
// when there is none, a message that says where it looked and which setting to fix.
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');
const { findAdapter, notFound } = require('../../editors/vscode/adapter');

function layout(t, files) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'monarch-pdb-adapter-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  for (const [file, mode] of Object.entries(files)) {
    fs.mkdirSync(path.join(root, path.dirname(file)), { recursive: true });
    fs.writeFileSync(path.join(root, file), '#!/bin/sh\n', { mode });
  }
  return (file) => path.join(root, file);
}

const EVERYWHERE = {
  'conda/bin/python': 0o755, 'conda/bin/monarch-pdb': 0o755, 'project/.venv/bin/monarch-pdb': 0o755,
  'other/venv/bin/monarch-pdb': 0o755, 'usr/bin/monarch-pdb': 0o755,
};

test('the Python extension\'s interpreter comes first', (t) => {
  const at = layout(t, EVERYWHERE);
  const found = findAdapter({ python: at('conda/bin/python'), folders: [at('project')], env: { PATH: at('usr/bin') } });
  assert.equal(found.command, at('conda/bin/monarch-pdb'));
});

test('without the Python extension, the workspace\'s .venv, then venv, comes before PATH', (t) => {
  const at = layout(t, EVERYWHERE);
  const env = { PATH: at('usr/bin') };
  assert.equal(findAdapter({ folders: [at('project'), at('other')], env }).command, at('project/.venv/bin/monarch-pdb'));
  assert.equal(findAdapter({ folders: [at('other')], env }).command, at('other/venv/bin/monarch-pdb'));
  assert.equal(findAdapter({ python: at('conda/bin/nothing-here/python'), folders: [at('other')], env }).command,
    at('other/venv/bin/monarch-pdb'), 'an interpreter without monarch-pdb beside it is passed over');
});

test('PATH last, and only an executable file counts', (t) => {
  const at = layout(t, { 'project/.venv/bin/monarch-pdb': 0o644, 'usr/bin/monarch-pdb': 0o755 });
  const found = findAdapter({ folders: [at('project')], env: { PATH: `${at('nothing')}${path.delimiter}${at('usr/bin')}` } });
  assert.equal(found.command, at('usr/bin/monarch-pdb'));
});

test('none found: every place looked at, and a message naming the setting to fix', (t) => {
  const at = layout(t, { 'conda/bin/python': 0o755 });
  const found = findAdapter({ python: at('conda/bin/python'), folders: [at('project')], env: { PATH: at('usr/bin') } });
  assert.equal(found.command, undefined);
  assert.deepEqual(found.looked, [at('conda/bin/monarch-pdb'), at('project/.venv/bin/monarch-pdb'),
    at('project/venv/bin/monarch-pdb'), at('usr/bin/monarch-pdb')]);
  assert.match(notFound(undefined), /^monarch-pdb: no monarch-pdb command found .*set "adapter" in the launch configuration/);
});

test('the configuration\'s adapter is used as given, and named when it is not there', (t) => {
  const at = layout(t, EVERYWHERE);
  const env = { PATH: at('usr/bin') };
  assert.equal(findAdapter({ adapter: at('project/.venv/bin/monarch-pdb'), python: at('conda/bin/python'), env }).command,
    at('project/.venv/bin/monarch-pdb'));
  assert.equal(findAdapter({ adapter: 'monarch-pdb', env }).command, at('usr/bin/monarch-pdb'));
  assert.equal(findAdapter({ adapter: at('gone/monarch-pdb'), env }).command, undefined);
  assert.equal(notFound(at('gone/monarch-pdb')),
    `monarch-pdb: the adapter "${at('gone/monarch-pdb')}" set as "adapter" in the launch configuration is not an executable file`);
});

// The extension itself, with a stand-in for the part of VS Code's API it calls.
function extensionIn(folders, said) {
  const Module = require('node:module');
  const load = Module._load;
  class CancellationError extends Error {}
  const vscode = {
    CancellationError,
    DebugAdapterExecutable: class { constructor(command, args) { Object.assign(this, { command, args }); } },
    EventEmitter: class { constructor() { this.event = () => ({}); } fire() {} },
    commands: { registerCommand: () => ({}) },
    extensions: { getExtension: () => undefined },
    workspace: { workspaceFolders: folders.map((fsPath) => ({ uri: { fsPath } })) },
    window: {
      createOutputChannel: () => ({ appendLine: (line) => said.output.push(line), show() {}, dispose() {} }),
      showErrorMessage: (message) => { said.notifications.push(message); return Promise.resolve(undefined); },
      registerTreeDataProvider: () => ({}),
    },
    debug: {
      registerDebugAdapterDescriptorFactory: (type, factory) => { said.factory = factory; return {}; },
      onDidReceiveDebugSessionCustomEvent: () => ({}),
      onDidChangeActiveDebugSession: () => ({}),
      onDidTerminateDebugSession: () => ({}),
    },
  };
  Module._load = function (request, ...rest) { return request === 'vscode' ? vscode : load.call(this, request, ...rest); };
  try {
    const file = require.resolve('../../editors/vscode/extension');
    delete require.cache[file];
    require(file).activate({ subscriptions: [] });
  } finally {
    Module._load = load;
  }
  return { factory: said.factory, CancellationError };
}

test('F5 finds the workspace\'s .venv, and without one says so in a notification and the Output channel', async (t) => {
  const at = layout(t, { 'project/.venv/bin/monarch-pdb': 0o755, 'empty/README': 0o644 });
  const path0 = process.env.PATH;
  process.env.PATH = at('usr/bin');
  t.after(() => { process.env.PATH = path0; });
  const said = { output: [], notifications: [] };
  const found = await extensionIn([at('project')], said).factory.createDebugAdapterDescriptor({ configuration: {} });
  assert.deepEqual([found.command, found.args], [at('project/.venv/bin/monarch-pdb'), ['dap']]);

  const none = { output: [], notifications: [] };
  const { factory, CancellationError } = extensionIn([at('empty')], none);
  await assert.rejects(factory.createDebugAdapterDescriptor({ configuration: {} }), CancellationError);
  assert.deepEqual(none.notifications, [notFound(undefined)]);
  assert.ok(none.output.join('\n').startsWith(notFound(undefined)));
  assert.ok(none.output.join('\n').includes(at('empty/.venv/bin/monarch-pdb')));
});
