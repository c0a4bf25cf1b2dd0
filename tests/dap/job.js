// The program under test and its broker, with a private runtime directory and an ephemeral
// port, as the Python tests run them; and the adapter's events, kept in order of arrival.
'use strict';

const cp = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..');
const BIN = process.env.MONARCH_PDB_BIN || path.join(ROOT, '.venv', 'bin');
const MONARCH_PDB = path.join(BIN, 'monarch-pdb');
const PYTHON = path.join(BIN, 'python');
const WAIT = 90;

class Job {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'monarch-pdb-dap-'));
    this.env = { ...process.env };
    for (const name of Object.keys(this.env)) {
      if (name.startsWith('MONARCH_PDB_') || name.startsWith('MONARCH_DEBUG_')) delete this.env[name];
    }
    Object.assign(this.env, {
      MONARCH_PDB_RUNTIME_DIR: path.join(this.dir, 'run'),
      MONARCH_DEBUG_SERVER_HOST: '127.0.0.1',
      MONARCH_DEBUG_SERVER_PORT: '0',
      MONARCH_PDB_HISTORY: '',
      PYTHONUNBUFFERED: '1',
    });
    this.program = null;
    this.adapter = null;
  }

  write(name, text) {
    fs.writeFileSync(path.join(this.dir, name), text);
  }

  run(script, ...args) {
    this.program = cp.spawn(PYTHON, [script, ...args], { env: this.env, cwd: ROOT, detached: true, stdio: 'ignore' });
  }

  shell(commands, flags = []) {
    const args = ['debug', ...flags, ...commands.flatMap((c) => ['-c', c])];
    const done = cp.spawnSync(MONARCH_PDB, args, { env: this.env, encoding: 'utf8', timeout: (WAIT + 30) * 1000 });
    if (done.status !== 0) throw new Error(`monarch-pdb ${args.join(' ')}: ${done.stdout}${done.stderr}`);
    return done.stdout;
  }

  /** Block until `count` ranks of `actor` are stopped (the shell's own `wait`). */
  waitFor(actor, count) {
    this.shell([`wait ${actor} ${count} --timeout ${WAIT}`]);
  }

  list() {
    return JSON.parse(this.shell(['list'], ['--json']));
  }

  /** Ends the adapter, the program and its brokers, whether the test passed or not: a test that
   * failed with its adapter running would keep the test runner waiting for it. */
  end() {
    if (this.adapter) this.adapter.stopAdapter();
    if (this.program && this.program.exitCode === null) {
      try { process.kill(-this.program.pid, 'SIGKILL'); } catch (e) { /* gone already */ }
    }
    const run = this.env.MONARCH_PDB_RUNTIME_DIR;
    const brokers = fs.existsSync(run) ? fs.readdirSync(run).filter((f) => /^broker-\d+\.json$/.test(f)) : [];
    for (const file of brokers) {
      try { process.kill(JSON.parse(fs.readFileSync(path.join(run, file))).pid, 'SIGTERM'); } catch (e) { /* gone */ }
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

class Events {
  /** The DAP client drops an event that comes before `waitForEvent` is called: keep them all. */
  constructor(dc, names) {
    this.kept = [];
    this.waiters = [];
    for (const name of names) {
      dc.on(name, (event) => {
        this.kept.push(event);
        for (const wake of this.waiters.splice(0)) wake();
      });
    }
  }

  /** The first `count` events `name` that `match`, removed from those kept; within `timeout` ms. */
  async take(name, count = 1, match = () => true, timeout = WAIT * 1000) {
    const deadline = Date.now() + timeout;
    for (;;) {
      const found = this.kept.filter((e) => e.event === name && match(e)).slice(0, count);
      if (found.length === count) {
        this.kept = this.kept.filter((e) => !found.includes(e));
        return found;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`expected ${count} '${name}' events, had ${JSON.stringify(this.kept)}`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => { clearTimeout(timer); resolve(); });
      });
    }
  }
}

module.exports = { Events, Job, MONARCH_PDB, PYTHON, ROOT };
