// Starts `monarch-pdb dap` for a `monarch-pdb` debug session: the launch configuration's
// `adapter`, else the one beside the Python interpreter selected in the Python extension, else
// one in a workspace folder's `.venv` or `venv`, else `monarch-pdb` on PATH (see adapter.js).
// When none is found, a notification and the Output channel say so, and which setting to fix.
// Plain JavaScript, no build step.
'use strict';

const vscode = require('vscode');
const { findAdapter, notFound } = require('./adapter');
const ranksView = require('./ranks_view');

async function selectedPython() {
  const python = vscode.extensions.getExtension('ms-python.python');
  if (!python) return undefined;
  const api = python.isActive ? python.exports : await python.activate();
  const environments = api && api.environments;
  if (!environments) return undefined;
  const resolved = await environments.resolveEnvironment(environments.getActiveEnvironmentPath());
  return resolved && resolved.executable && resolved.executable.uri && resolved.executable.uri.fsPath;
}

function activate(context) {
  ranksView.register(context);
  const output = vscode.window.createOutputChannel('monarch-pdb');
  context.subscriptions.push(output, vscode.debug.registerDebugAdapterDescriptorFactory('monarch-pdb', {
    async createDebugAdapterDescriptor(session) {
      const adapter = session.configuration.adapter;
      const python = adapter ? undefined : await selectedPython().catch(() => undefined);
      const folders = (vscode.workspace.workspaceFolders || []).map((folder) => folder.uri.fsPath);
      const { command, looked } = findAdapter({ adapter, python, folders });
      if (command) {
        output.appendLine(`starting ${command} dap`);
        return new vscode.DebugAdapterExecutable(command, ['dap']);
      }
      const message = notFound(adapter);
      output.appendLine(`${message}\nlooked for it at:\n${looked.map((place) => `  ${place}`).join('\n')}`);
      vscode.window.showErrorMessage(message, 'Show Output').then((choice) => choice && output.show());
      throw new vscode.CancellationError();  // said once, above: VS Code adds no message of its own
    },
  }));
}

function deactivate() {}

module.exports = { activate, deactivate };
