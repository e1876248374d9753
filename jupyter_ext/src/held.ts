import { ISessionContext } from '@jupyterlab/apputils';
import { Cell, CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, Notebook, NotebookActions } from '@jupyterlab/notebook';

import { dismissKernel, IKernelProgress } from './api';

/** The commands that interrupt or shut down a notebook's kernel. */
export const STOP_COMMANDS = new Set([
  'notebook:interrupt-kernel',
  'notebook:shutdown-kernel',
  'kernelmenu:interrupt',
  'kernelmenu:shutdown'
]);
const NOT_STARTED = 'the kernel did not start';
const WAITING = 'Waiting for the kernel';
const NOTE = 'jp-Devboxes-heldNote';

/** The cells of one notebook run while its kernel was starting. */
interface IGroup {
  title: string;
  cells: CodeCell[];
  /** The start failed; the reason comes with the next progress report. */
  failed: boolean;
  /** Failures listed before the cells were held: older starts', not this one's. */
  earlier: Set<string>;
}

/**
 * Cells run while a notebook's devbox kernel starts.
 *
 * JupyterLab makes a notebook's session only once the server has started its kernel,
 * and a devbox kernel's start waits for its box, often for minutes. JupyterLab clears a
 * cell run in that time without a word ("[ ]" and nothing else), because there is no
 * kernel to send it to. Such a cell is held here instead: it shows "[*]" and the start's
 * progress, runs when the kernel is there (held cells in the order they were run), and
 * says why when the start fails or is cancelled.
 */
export class HeldCells {
  private readonly groups = new Map<ISessionContext, IGroup>();
  private kernels: IKernelProgress[] = [];

  constructor(
    private readonly tracker: INotebookTracker,
    private readonly titleOf: (progress: IKernelProgress) => string
  ) {
    NotebookActions.executionScheduled.connect((_, { notebook, cell }) =>
      this.scheduled(notebook, cell)
    );
  }

  /** The latest devbox kernel starts, from the sidebar's watch. */
  update(kernels: IKernelProgress[]): void {
    this.kernels = kernels;
    for (const [context, group] of this.groups) {
      const failure = this.failure(group);
      if (group.failed && failure) {
        this.fail(context, group, failure.message);
      } else if (!group.failed) {
        this.show(group);
      }
    }
  }

  /** Cancel the start of the current notebook's kernel, if it is waiting for its box. */
  cancelCurrent(): void {
    const context = this.tracker.currentWidget?.sessionContext;
    if (!context || !starting(context)) {
      return;
    }
    const title = context.kernelDisplayName;
    for (const k of this.kernels) {
      if (this.titleOf(k) === title && k.phase !== 'running' && k.phase !== 'failed') {
        // A start already connecting to its box cannot be cancelled; it answers 404.
        void dismissKernel(k.kernel_id).catch(() => undefined);
      }
    }
  }

  private scheduled(notebook: Notebook, cell: Cell): void {
    if (cell instanceof CodeCell) {
      note(cell, null, false);
    }
    const context = this.tracker.find(panel => panel.content === notebook)?.sessionContext;
    if (
      !context ||
      !(cell instanceof CodeCell) ||
      !cell.model.sharedModel.getSource().trim() ||
      !starting(context)
    ) {
      return;
    }
    let group = this.groups.get(context);
    if (!group) {
      const earlier = this.kernels.filter(k => k.phase === 'failed').map(k => k.kernel_id);
      group = {
        title: context.kernelDisplayName,
        cells: [],
        failed: false,
        earlier: new Set(earlier)
      };
      this.groups.set(context, group);
      this.follow(context);
    }
    group.cells.push(cell);
    const held = group;
    // JupyterLab clears the cell right after this signal; show it as held after that.
    void Promise.resolve().then(() => this.show(held));
  }

  /** Run the held cells once the kernel exists, or fail them when the start ends without. */
  private follow(context: ISessionContext): void {
    const changed = (): void => {
      const group = this.groups.get(context);
      if (!group) {
        context.kernelChanged.disconnect(changed);
        return;
      }
      if (context.session?.kernel) {
        context.kernelChanged.disconnect(changed);
        this.groups.delete(context);
        void run(context, group.cells);
      } else if (context.hasNoKernel) {
        context.kernelChanged.disconnect(changed);
        group.failed = true;
        const failure = this.failure(group);
        if (failure) {
          this.fail(context, group, failure.message);
        }
      }
    };
    context.kernelChanged.connect(changed);
  }

  private failure(group: IGroup): IKernelProgress | undefined {
    const failed = this.latest(group.title, ['failed']);
    return failed && !group.earlier.has(failed.kernel_id) ? failed : undefined;
  }

  private latest(title: string, phases: string[]): IKernelProgress | undefined {
    return this.kernels
      .filter(k => this.titleOf(k) === title && phases.includes(k.phase))
      .sort((a, b) => b.updated - a.updated)[0];
  }

  private show(group: IGroup): void {
    const now = this.latest(group.title, ['starting', 'creating', 'waiting', 'connecting']);
    const text = `${WAITING} ${group.title}: ${now ? now.message : 'starting'}`;
    for (const cell of group.cells) {
      cell.setPrompt('*');
      note(cell, text, false);
    }
  }

  private fail(context: ISessionContext, group: IGroup, message: string): void {
    this.groups.delete(context);
    for (const cell of group.cells) {
      cell.setPrompt('');
      note(cell, `Not run: ${NOT_STARTED}: ${message}`, true);
    }
  }
}

/** A start is under way: a kernel was chosen but the server has not answered with it. */
function starting(context: ISessionContext): boolean {
  return !context.session?.kernel && !context.hasNoKernel && !context.isDisposed;
}

/**
 * A line under the cell about its held run, or none (``text`` null). It is part of the
 * page only, not of the notebook: a notebook saved meanwhile keeps no trace of it.
 */
function note(cell: CodeCell, text: string | null, failed: boolean): void {
  let line = cell.node.querySelector<HTMLElement>(`.${NOTE}`);
  if (text === null) {
    line?.remove();
    return;
  }
  if (!line) {
    line = document.createElement('div');
    line.className = NOTE;
    cell.node.append(line);
  }
  line.textContent = text;
  line.setAttribute('role', failed ? 'alert' : 'status');
  line.classList.toggle('jp-mod-failed', failed);
}

/** The held cells in order; after one that fails, the rest are left unrun, as Lab does. */
async function run(context: ISessionContext, cells: CodeCell[]): Promise<void> {
  let stopped = false;
  for (const cell of cells) {
    if (cell.isDisposed) {
      continue;
    }
    note(cell, null, false);
    if (stopped) {
      cell.setPrompt('');
      continue;
    }
    try {
      const reply = await CodeCell.execute(cell, context);
      stopped = reply?.content.status !== 'ok';
    } catch {
      stopped = true;
    }
  }
}
