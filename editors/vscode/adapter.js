// Where the `monarch-pdb` command is, looked for as users expect: the launch configuration's
// `adapter`, else beside the Python extension's selected interpreter, else in a workspace
// folder's `.venv` or `venv`, else on PATH. VS Code's extension host takes PATH from the login
// shell, where a project's virtual environment seldom is, so PATH comes last. No `vscode`
// here: the extension gives what it knows, and the lookup is tested with node alone.
'use strict';

const fs = require('fs');
const path = require('path');

const SETTING = '"adapter" in the launch configuration';

function executable(file) {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

// `{command, looked}`: the command to run, undefined when none is found, and every place
// looked at, in order, for the message that says so.
function findAdapter({ adapter, python, folders = [], env = process.env, platform = process.platform }) {
  const windows = platform === 'win32';
  const name = windows ? 'monarch-pdb.exe' : 'monarch-pdb';
  const looked = [];
  const first = (candidates) => {
    for (const candidate of candidates) {
      looked.push(candidate);
      if (executable(candidate)) return candidate;
    }
    return undefined;
  };
  const onPath = (command) => first((env.PATH || env.Path || '').split(path.delimiter).filter(Boolean)
    .map((dir) => path.join(dir, command)));
  if (adapter) {
    const command = path.isAbsolute(adapter) || adapter.includes(path.sep) ? first([adapter]) : onPath(adapter);
    return { command, looked };
  }
  const bin = windows ? 'Scripts' : 'bin';
  const command = (python && first([path.join(path.dirname(python), name)]))
    || first(folders.flatMap((folder) => ['.venv', 'venv'].map((venv) => path.join(folder, venv, bin, name))))
    || onPath(name);
  return { command, looked };
}

// The notification's text when no command is found: the cause, and the setting to fix.
function notFound(adapter) {
  if (adapter) return `monarch-pdb: the adapter ${JSON.stringify(adapter)} set as ${SETTING} is not an executable file`;
  return 'monarch-pdb: no monarch-pdb command found beside the selected Python interpreter, in the workspace\'s '
    + `.venv or venv, or on PATH: install monarch-pdb there, or set ${SETTING} to its path`;
}

module.exports = { findAdapter, notFound };
