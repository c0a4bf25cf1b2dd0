// The "Ranks" view in Run and Debug: the groups and merged stacks of the active monarch-pdb
// session (see ranks_model.js), asked again whenever the adapter says ranks changed. Selecting a
// group shows its first paused thread; its inline actions continue, step or interrupt its ranks.
'use strict';

const vscode = require('vscode');
const { roots, action } = require('./ranks_model');

const VIEW = 'monarch-pdb.ranks';
const CHANGED = 'monarchRanksChanged';

class RanksView {
  constructor() {
    this.changed = new vscode.EventEmitter();
    this.onDidChangeTreeData = this.changed.event;
    this.timer = undefined;
  }

  session() {
    const session = vscode.debug.activeDebugSession;
    return session && session.type === 'monarch-pdb' ? session : undefined;
  }

  refresh() {
    clearTimeout(this.timer);  // events come folded, but a burst of them asks once
    this.timer = setTimeout(() => this.changed.fire(), 200);
  }

  async getChildren(item) {
    if (item) return item.children || [];
    const session = this.session();
    if (!session) return [];
    try {
      return roots(await session.customRequest('monarchRanks', { stacks: true }));
    } catch (error) {
      return [{ kind: 'error', label: String(error.message || error) }];
    }
  }

  getTreeItem(item) {
    const children = item.children && item.children.length;
    const state = !children ? vscode.TreeItemCollapsibleState.None
      : item.kind === 'heading' ? vscode.TreeItemCollapsibleState.Expanded
        : vscode.TreeItemCollapsibleState.Collapsed;
    const tree = new vscode.TreeItem(item.label, state);
    tree.description = item.description;
    tree.tooltip = item.tooltip;
    tree.contextValue = item.kind;
    if (item.kind === 'group' && item.threadId) {
      tree.command = { command: 'monarch-pdb.ranks.focus', title: 'Show its first thread', arguments: [item] };
    }
    return tree;
  }
}

function register(context) {
  const view = new RanksView();
  const act = (verb) => async (item) => {
    const session = view.session();
    if (session && item && item.group) await session.customRequest('monarchRanksAct', action(item, verb));
  };
  context.subscriptions.push(
    vscode.window.registerTreeDataProvider(VIEW, view),
    vscode.debug.onDidReceiveDebugSessionCustomEvent((e) => {
      if (e.session.type === 'monarch-pdb' && e.event === CHANGED) view.refresh();
    }),
    vscode.debug.onDidChangeActiveDebugSession(() => view.refresh()),
    vscode.debug.onDidTerminateDebugSession(() => view.refresh()),
    vscode.commands.registerCommand('monarch-pdb.ranks.refresh', () => view.refresh()),
    vscode.commands.registerCommand('monarch-pdb.ranks.focus', async (item) => {
      const session = view.session();
      if (session && item && item.threadId) await session.customRequest('monarchFocus', { threadId: item.threadId });
    }),
    vscode.commands.registerCommand('monarch-pdb.ranks.continue', act('continue')),
    vscode.commands.registerCommand('monarch-pdb.ranks.next', act('next')),
    vscode.commands.registerCommand('monarch-pdb.ranks.interrupt', act('interrupt')),
  );
}

module.exports = { register };
