import { Widget } from '@lumino/widgets';

import {
  createDevbox,
  DevboxesApiError,
  getCapabilities,
  ICapabilities,
  IDevbox,
  waitDevbox
} from './api';
import { CPU_ONLY, normalizeName, profileLabel, statusLine } from './labels';

const PRESETS = ['small', 'medium', 'large'];
/** Seconds one server-side wait may hold the request; the panel then asks again. */
const WAIT_SECONDS = 20;
/** Pause before asking again after the server could not answer. */
const RETRY_MS = 3000;
const FINAL_STATES = new Set(['ready', 'degraded', 'stopped']);

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Record<string, string> = {},
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    node.setAttribute(key, value);
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function field(labelText: string, control: HTMLElement): HTMLLabelElement {
  const label = element('label', { class: 'jp-Devboxes-field' });
  label.append(element('span', {}, labelText), control);
  return label;
}

function sleep(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

/** The form that creates a box and follows each created box until it is ready or degraded. */
export class DevboxPanel extends Widget {
  private readonly nameInput: HTMLInputElement;
  private readonly presetSelect: HTMLSelectElement;
  private readonly ttlInput: HTMLInputElement;
  private readonly acceleratorSelect: HTMLSelectElement;
  private readonly acceleratorHelp: HTMLElement;
  private readonly createButton: HTMLButtonElement;
  private readonly errorBox: HTMLElement;
  private readonly boxList: HTMLElement;
  private capabilities: ICapabilities | null = null;

  constructor() {
    super();
    this.id = 'devboxes-panel';
    this.title.label = 'GPU Devbox';
    this.title.closable = true;
    this.addClass('jp-Devboxes-panel');

    this.nameInput = element('input', {
      type: 'text',
      'data-testid': 'devbox-name',
      'aria-label': 'Devbox name',
      placeholder: 'my-box',
      autocomplete: 'off',
      spellcheck: 'false'
    });
    this.presetSelect = element('select', {
      'data-testid': 'devbox-preset',
      'aria-label': 'Preset'
    });
    for (const preset of PRESETS) {
      this.presetSelect.append(element('option', { value: preset }, preset));
    }
    this.ttlInput = element('input', {
      type: 'number',
      min: '1',
      step: '1',
      value: '24',
      'data-testid': 'devbox-ttl',
      'aria-label': 'Auto-stop after hours'
    });
    this.acceleratorSelect = element('select', {
      'data-testid': 'devbox-accelerator',
      'aria-label': 'Accelerator'
    });
    this.acceleratorSelect.append(element('option', { value: '' }, CPU_ONLY));
    this.acceleratorHelp = element('div', {
      class: 'jp-Devboxes-help',
      'data-testid': 'devbox-accelerator-help'
    });
    this.createButton = element(
      'button',
      { type: 'submit', class: 'jp-mod-styled jp-mod-accept', 'data-testid': 'devbox-create' },
      'Create'
    );
    this.errorBox = element('div', {
      class: 'jp-Devboxes-error',
      role: 'alert',
      'data-testid': 'devbox-error'
    });
    this.boxList = element('ul', {
      class: 'jp-Devboxes-list',
      'data-testid': 'devbox-list',
      'aria-label': 'Created devboxes'
    });

    const form = element('form', { class: 'jp-Devboxes-form', 'data-testid': 'devbox-form' });
    form.append(
      field('Name', this.nameInput),
      field('Preset', this.presetSelect),
      field('Auto-stop after (hours)', this.ttlInput),
      field('Accelerator', this.acceleratorSelect),
      this.acceleratorHelp,
      this.createButton,
      this.errorBox
    );
    form.addEventListener('submit', event => {
      event.preventDefault();
      void this.create();
    });
    this.acceleratorSelect.addEventListener('change', () => this.describeAccelerator());

    this.node.append(element('h2', {}, 'GPU Devbox'), form, this.boxList);
    void this.loadCapabilities();
  }

  private async loadCapabilities(): Promise<void> {
    try {
      this.capabilities = await getCapabilities();
    } catch (error) {
      this.showError(`Could not load the accelerator catalog: ${String((error as Error).message)}`);
      return;
    }
    const gpu = this.capabilities.gpu;
    for (const profile of gpu.profiles) {
      const option = element('option', { value: profile.name }, profileLabel(profile));
      if (profile.description) {
        option.title = profile.description;
      }
      this.acceleratorSelect.append(option);
    }
    this.acceleratorSelect.value = '';
    this.acceleratorSelect.disabled = !gpu.enabled;
    this.describeAccelerator();
  }

  private describeAccelerator(): void {
    const gpu = this.capabilities?.gpu;
    if (gpu && !gpu.enabled) {
      this.acceleratorHelp.textContent =
        'GPU acceleration is disabled by the operator: new boxes get CPU only.';
      return;
    }
    const chosen = gpu?.profiles.find(p => p.name === this.acceleratorSelect.value);
    this.acceleratorHelp.textContent = chosen
      ? (chosen.description ?? '')
      : 'No accelerator: the box gets CPU and memory only.';
  }

  private showError(message: string): void {
    this.errorBox.textContent = message;
  }

  private async create(): Promise<void> {
    this.showError('');
    let name: string;
    try {
      name = normalizeName(this.nameInput.value);
    } catch (error) {
      this.showError((error as Error).message);
      return;
    }
    const ttl = Number(this.ttlInput.value);
    if (!Number.isInteger(ttl) || ttl < 1) {
      this.showError('Auto-stop must be a whole number of hours, at least 1.');
      return;
    }
    const profile = this.acceleratorSelect.value;
    this.createButton.disabled = true;
    let devbox: IDevbox;
    try {
      devbox = await createDevbox({
        name,
        preset: this.presetSelect.value,
        ttl_hours: ttl,
        gpu: profile ? { profile } : null
      });
    } catch (error) {
      this.showError((error as Error).message);
      return;
    } finally {
      this.createButton.disabled = false;
    }
    this.nameInput.value = '';
    void this.follow(devbox);
  }

  private async follow(first: IDevbox): Promise<void> {
    const row = element('li', { 'data-testid': `devbox-row-${first.name}` });
    const status = element('span', {
      class: 'jp-Devboxes-status',
      'data-testid': `devbox-status-${first.name}`,
      'aria-live': 'polite'
    });
    const ssh = element('code', { 'data-testid': `devbox-ssh-${first.name}` });
    row.append(element('strong', {}, first.name), status, ssh);
    this.boxList.prepend(row);

    let devbox = first;
    for (;;) {
      status.textContent = statusLine(devbox);
      row.dataset.state = devbox.state;
      ssh.textContent = devbox.state === 'ready' && devbox.ssh_command ? devbox.ssh_command : '';
      if (FINAL_STATES.has(devbox.state) || this.isDisposed) {
        return;
      }
      try {
        devbox = await waitDevbox(devbox.name, WAIT_SECONDS);
      } catch (error) {
        const apiError = error as DevboxesApiError;
        status.textContent = `${devbox.state} — ${apiError.message}`;
        if (apiError.status === 404 || this.isDisposed) {
          return;
        }
        await sleep(RETRY_MS);
      }
    }
  }
}
