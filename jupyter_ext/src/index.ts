import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';

import { serverExtensionLoaded } from './api';
import { HeldCells, STOP_COMMANDS } from './held';
import { DevboxSidebar } from './sidebar';

const COMMAND = 'devboxes:open-panel';
const CATEGORY = 'Devboxes';

const gpuIcon = new LabIcon({
  name: 'devboxes:gpu',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M7 7h10v10H7zM9 9v6h6V9zM9 2h2v3H9zm4 0h2v3h-2zM9 19h2v3H9zm4 0h2v3h-2zM2 9h3v2H2zm0 4h3v2H2zm17-4h3v2h-3zm0 4h3v2h-3z"/>' +
    '</g></svg>'
});

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'devboxes-jupyter:plugin',
  description: 'Create GPU Devboxes from JupyterLab.',
  autoStart: true,
  optional: [ILauncher, ICommandPalette, ILayoutRestorer, INotebookTracker],
  activate: async (
    app: JupyterFrontEnd,
    launcher: ILauncher | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null
  ) => {
    if (!(await serverExtensionLoaded())) {
      console.info(
        "Devboxes: this Jupyter server does not run the devboxes_jupyter extension (install 'devboxes[jupyter]'); the sidebar is left out."
      );
      return;
    }
    const sidebar = new DevboxSidebar();
    sidebar.title.icon = gpuIcon;
    sidebar.title.caption = 'Devboxes';
    app.shell.add(sidebar, 'left', { rank: 600 });
    // Reopened after a reload if it was open before.
    restorer?.add(sidebar, 'devboxes-sidebar');
    sidebar.onAvailability = () => void app.serviceManager.kernelspecs.refreshSpecs();
    if (notebooks) {
      const held = new HeldCells(notebooks, progress => sidebar.kernelTitle(progress));
      sidebar.onKernels = kernels => held.update(kernels);
      // Jupyter has no kernel to interrupt or shut down until its start answers: these
      // commands cancel a start that is still waiting for its box.
      app.commands.commandExecuted.connect((_, { id }) => {
        if (STOP_COMMANDS.has(id)) {
          held.cancelCurrent();
        }
      });
    }

    app.commands.addCommand(COMMAND, {
      label: 'GPU Devbox',
      caption: 'Show your Devboxes and create one with an optional GPU',
      icon: gpuIcon,
      execute: () => {
        app.shell.activateById(sidebar.id);
        sidebar.showForm();
      }
    });

    launcher?.add({ command: COMMAND, category: CATEGORY, rank: 0 });
    palette?.addItem({ command: COMMAND, category: CATEGORY });
  }
};

export default plugin;
