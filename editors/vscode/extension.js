// Starts `monarch-pdb dap` for a `monarch-pdb` debug session: the one installed beside the
// Python interpreter selected in the Python extension, else the launch configuration's
// `adapter`, else `monarch-pdb` on PATH. Plain JavaScript, no build step.
'use strict';

const fs = require('fs');
const path = require('path');
const vscode = require('vscode');

async function selectedPython() {
  const python = vscode.extensions.getExtension('ms-python.python');
  if (!python) return undefined;
  const api = python.isActive ? python.exports : await python.activate();
  const environments = api && api.environments;
  if (!environments) return undefined;
  const resolved = await environments.resolveEnvironment(environments.getActiveEnvironmentPath());
  return resolved && resolved.executable && resolved.executable.uri && resolved.executable.uri.fsPath;
}

async function adapterCommand(configuration) {
  if (configuration.adapter) return configuration.adapter;
  const python = await selectedPython().catch(() => undefined);
  if (python) {
    const beside = path.join(path.dirname(python), process.platform === 'win32' ? 'monarch-pdb.exe' : 'monarch-pdb');
    if (fs.existsSync(beside)) return beside;
  }
  return 'monarch-pdb';
}

function activate(context) {
  context.subscriptions.push(vscode.debug.registerDebugAdapterDescriptorFactory('monarch-pdb', {
    async createDebugAdapterDescriptor(session) {
      return new vscode.DebugAdapterExecutable(await adapterCommand(session.configuration), ['dap']);
    },
  }));
}

function deactivate() {}

module.exports = { activate, deactivate };
