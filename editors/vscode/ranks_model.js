// The Ranks view's items, from the adapter's `monarchRanks` answer: the ranks grouped as the
// shell's `list` groups them past a screenful, and the merged stacks of the live ranks. No
// `vscode` here: the extension makes tree items of these, and node alone tests them.
'use strict';

// One item per group: `debugee ranks[0,4,8,12] (4)`, then where, state and hosts, as `list` shows.
function groupItems(answer) {
  return (answer.groups || []).map((group) => ({
    kind: 'group',
    label: `${group.actor} ranks[${group.ranks}] (${group.count})`,
    description: [group.line ? `${group.function}:${group.line}` : group.function, group.state, group.hosts]
      .filter(Boolean).join(' · '),
    tooltip: [`${group.job ? `${group.job}:` : ''}${group.actor} ranks[${group.ranks}] (${group.count})`,
      `at ${group.function}${group.line ? `:${group.line}` : ''}, ${group.state}`,
      `coordinates ${group.coords}`, `hosts ${group.hosts}`,
      ...(group.attached ? [`held by ${group.attached}`] : [])].join('\n'),
    group,
    threadId: group.threadId,
  }));
}

// The merged stacks: one item per actor, each frame below with the ranks that pass through it.
// A chain of frames that the same ranks share is one item's children all the way down, as the
// shell's `stacks` draws a chain in one column.
function stackItems(answer) {
  const node = (item) => ({
    kind: 'frame', label: item.label, description: item.ranks, children: (item.children || []).map(node),
  });
  return (answer.stacks || []).map((tree) => ({
    kind: 'actor',
    label: `${tree.actor} ${tree.ranks}`,
    description: tree.missing ? `${tree.missing} sent no stack` : '',
    children: (tree.children || []).map(node),
  }));
}

// The view's two roots.
function roots(answer) {
  const groups = groupItems(answer);
  const stacks = stackItems(answer);
  return [
    { kind: 'heading', label: 'Groups', description: `${groups.reduce((n, g) => n + g.group.count, 0)} ranks`,
      children: groups },
    { kind: 'heading', label: 'Stacks', description: 'merged, of the live ranks', children: stacks },
  ];
}

// What a group's action asks of the adapter (`monarchRanksAct`).
function action(item, verb) {
  return { action: verb, job: item.group.job, actor: item.group.actor, ranks: item.group.ranks };
}

module.exports = { groupItems, stackItems, roots, action };
