import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { LabIcon } from '@jupyterlab/ui-components';

import { DevboxPanel } from './panel';

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
  optional: [ILauncher, ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    launcher: ILauncher | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const tracker = new WidgetTracker<MainAreaWidget<DevboxPanel>>({ namespace: 'devboxes' });

    app.commands.addCommand(COMMAND, {
      label: 'GPU Devbox',
      caption: 'Create a Devbox with an optional GPU',
      icon: gpuIcon,
      execute: () => {
        const open = tracker.currentWidget;
        if (open && !open.isDisposed) {
          app.shell.activateById(open.id);
          return open;
        }
        const widget = new MainAreaWidget({ content: new DevboxPanel() });
        widget.id = 'devboxes-panel-main';
        widget.title.label = 'GPU Devbox';
        widget.title.icon = gpuIcon;
        widget.title.closable = true;
        void tracker.add(widget);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
        return widget;
      }
    });

    launcher?.add({ command: COMMAND, category: CATEGORY, rank: 0 });
    palette?.addItem({ command: COMMAND, category: CATEGORY });
    if (restorer) {
      void restorer.restore(tracker, { command: COMMAND, name: () => 'devboxes' });
    }
  }
};

export default plugin;
