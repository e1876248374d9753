import { Clipboard, Dialog, InputDialog, Notification, showDialog } from '@jupyterlab/apputils';
import {
  addIcon,
  caretDownIcon,
  caretRightIcon,
  closeIcon,
  copyIcon,
  deleteIcon,
  LabIcon,
  runIcon,
  stopIcon
} from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import {
  ALL_CLUSTERS,
  AUTO_CLUSTER,
  Capabilities,
  changeDevbox,
  createDevbox,
  createDevboxOn,
  deleteDevbox,
  Devbox,
  DevboxCreate,
  DevboxesApiError,
  dismissFailedKernels,
  dismissKernel,
  extendDevbox,
  getCapabilities,
  getWhoAmI,
  getWhoAmIEverywhere,
  GpuProfile,
  IClusterView,
  IKernelProgress,
  ImageProfile,
  IView,
  PRESETS,
  watch
} from './api';
import {
  allocatedLabel,
  allocationLabel,
  autoStopLabel,
  clustersProfileParts,
  CPU_NOTE,
  CPU_ONLY,
  createdLine,
  DEFAULT_ENVIRONMENT,
  detail,
  elapsedLabel,
  environmentChoiceLabel,
  environmentLabel,
  GPU_DISABLED_NOTE,
  IClusterOffer,
  kernelTitle,
  profileLabel,
  reason,
  staleNotice
} from './labels';
/** Seconds the server may hold one watch; it answers sooner when anything changes. */
const WATCH_SECONDS = 25;
/** Pause before watching again after the server could not answer. */
const RETRY_MS = 5000;
/** The name whoami gives the operator's token, whose boxes belong to no one in particular. */
const OPERATOR = 'operator';

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

/** A JupyterLab-styled button: icon and label, with the label as tooltip for narrow widths. */
function button(
  icon: LabIcon,
  label: string,
  testid: string,
  onClick: () => void,
  accept = false
): HTMLButtonElement {
  const node = element('button', {
    type: 'button',
    class: `jp-Button jp-mod-styled jp-Devboxes-action ${accept ? 'jp-mod-accept' : 'jp-mod-minimal'}`,
    title: label,
    'aria-label': label,
    'data-testid': testid
  });
  node.append(
    icon.element({ tag: 'span', className: 'jp-Devboxes-actionIcon', elementSize: 'small' }),
    element('span', { class: 'jp-Devboxes-actionLabel' }, label)
  );
  node.addEventListener('click', event => {
    event.stopPropagation();
    onClick();
  });
  return node;
}

function field(labelText: string, control: HTMLElement): HTMLLabelElement {
  const label = element('label', { class: 'jp-Devboxes-field' });
  label.append(element('span', { class: 'jp-Devboxes-fieldLabel' }, labelText), control);
  return label;
}

function select(testid: string, label: string): HTMLSelectElement {
  return element('select', {
    class: 'jp-mod-styled jp-Devboxes-select',
    'data-testid': testid,
    'aria-label': label
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

/** The accelerators a create form offers: the catalog, and how each choice reads. */
interface IAccelerators {
  // False when the operator (of every cluster asked) has disabled GPU acceleration.
  enabled: boolean | undefined;
  profiles: GpuProfile[];
  // Text, or nodes that keep each cluster's count together when the label wraps.
  label: (profile: GpuProfile) => string | Node[];
}

/** A box of the list, with the cluster it is on (none on a server of one controller). */
interface IListed {
  box: Devbox;
  cluster: string | null;
  // Its cluster did not answer the latest listing: the box is as last seen.
  silent: boolean;
}

/**
 * A box's name in test ids and the sets of open rows and warned stops: NAME, or
 * NAME@CLUSTER on a server of several clusters, where two clusters may each have one.
 */
function boxKey(name: string, cluster: string | null): string {
  return cluster ? `${name}@${cluster}` : name;
}

/**
 * The Devboxes sidebar: every box live, with start, stop, delete and copy-SSH, a create
 * form with the accelerator picker, and the progress of devbox kernel starts.
 *
 * Updates come from the server extension's watch route, which lists the boxes once for
 * all browsers every few seconds and answers as soon as something changed.
 */
export class DevboxSidebar extends Widget {
  private readonly form: HTMLFormElement;
  private readonly nameInput: HTMLInputElement;
  private readonly presetSelect: HTMLSelectElement;
  private readonly ttlInput: HTMLInputElement;
  private readonly acceleratorGroup: HTMLFieldSetElement;
  private readonly acceleratorHelp: HTMLElement;
  private readonly environmentGroup: HTMLFieldSetElement;
  private readonly environmentError: HTMLElement;
  private readonly createButton: HTMLButtonElement;
  private readonly errorBox: HTMLElement;
  private readonly statusBox: HTMLElement;
  private readonly statusLine: HTMLElement;
  private readonly staleDetail: HTMLElement;
  private readonly kernelList: HTMLElement;
  private readonly clearFailures: HTMLButtonElement;
  private readonly boxList: HTMLElement;
  private readonly userLine: HTMLElement;
  private readonly clusterBar: HTMLElement;
  private readonly clusterSelect: HTMLSelectElement;
  private readonly clusterLines: HTMLElement;
  private readonly createdLine: HTMLElement;
  private capabilities: Capabilities | null = null;
  private view: IView | null = null;
  // The clusters of a server that serves several (null: one controller), and the one
  // the sidebar shows: ALL_CLUSTERS, or a cluster's name.
  private clusters: IClusterView[] | null = null;
  private selected: string = ALL_CLUSTERS;
  // Why this Jupyter server did not answer the latest watch; null once it did.
  private unanswered: string | null = null;
  // What the create form's choices were last made from, to make them again on a change.
  private choicesFrom = '';
  private readonly expanded = new Set<string>();
  private readonly notices = new Map<string, string>();
  // Stop warnings shown, by box and stop, with their notification's id.
  private readonly stopNotices = new Map<string, string>();
  // The chosen accelerator: '' for CPU only, else a profile name.
  private accelerator = '';
  // The chosen environment: '' for the operator's workspace image, else an image profile.
  private environment = '';
  // What was last chosen by hand, chosen again when a cluster that offers it is shown.
  private wantedAccelerator = '';
  private wantedEnvironment = '';
  // Why the list cannot be refreshed (the controller or this Jupyter server is
  // unreachable); null while it is live.
  private stale: string | null = null;
  // Kernel starts already known when the page loaded pop up no notification: a failure
  // from before would otherwise come back as a toast on every page load.
  private knownKernels: Set<string> | null = null;
  // Counts the kernel starts' seconds on while any is listed.
  private elapsedTimer: number | null = null;

  constructor() {
    super();
    this.id = 'devboxes-sidebar';
    this.addClass('jp-Devboxes-sidebar');

    this.nameInput = element('input', {
      type: 'text',
      class: 'jp-mod-styled jp-Devboxes-input',
      'data-testid': 'devbox-name',
      'aria-label': 'Devbox name',
      placeholder: 'my-box',
      autocomplete: 'off',
      spellcheck: 'false'
    });
    this.presetSelect = select('devbox-preset', 'Preset');
    for (const preset of PRESETS) {
      this.presetSelect.append(element('option', { value: preset }, preset));
    }
    this.ttlInput = element('input', {
      type: 'number',
      class: 'jp-mod-styled jp-Devboxes-input',
      min: '1',
      step: '1',
      value: '24',
      'data-testid': 'devbox-ttl',
      'aria-label': 'Auto-stop after hours'
    });
    // Radio buttons rather than a menu: each choice wraps to the panel's width, so its
    // free count stays readable in a narrow sidebar.
    this.acceleratorGroup = element('fieldset', {
      class: 'jp-Devboxes-choices',
      'data-testid': 'devbox-accelerator'
    });
    this.acceleratorHelp = element('div', {
      class: 'jp-Devboxes-help',
      'data-testid': 'devbox-accelerator-help'
    });
    // Which accelerators an image supports is not published, so a mismatch shows as the
    // controller's refusal, under this choice.
    this.environmentGroup = element('fieldset', {
      class: 'jp-Devboxes-choices',
      'data-testid': 'devbox-environment'
    });
    this.environmentError = element('div', {
      class: 'jp-Devboxes-error',
      role: 'alert',
      'data-testid': 'devbox-environment-error'
    });
    this.createButton = element(
      'button',
      { type: 'submit', class: 'jp-Button jp-mod-styled jp-mod-accept', 'data-testid': 'devbox-create' },
      'Create'
    );
    this.errorBox = element('div', {
      class: 'jp-Devboxes-error',
      role: 'alert',
      'data-testid': 'devbox-error'
    });
    // Where a create on a server of several clusters went, and why there.
    this.createdLine = element('div', {
      class: 'jp-Devboxes-created',
      role: 'status',
      'data-testid': 'devbox-created'
    });
    this.form = element('form', { class: 'jp-Devboxes-form', 'data-testid': 'devbox-form' });
    this.form.hidden = true;
    this.form.append(
      field('Name', this.nameInput),
      field('Preset', this.presetSelect),
      field('Auto-stop (hours)', this.ttlInput),
      this.acceleratorGroup,
      this.acceleratorHelp,
      this.environmentGroup,
      this.environmentError,
      this.createButton,
      this.errorBox,
      this.createdLine
    );
    this.form.addEventListener('submit', event => {
      event.preventDefault();
      void this.create();
    });
    this.acceleratorGroup.addEventListener('change', event => {
      this.accelerator = (event.target as HTMLInputElement).value;
      this.wantedAccelerator = this.accelerator;
      this.describeAccelerator();
    });
    this.environmentGroup.addEventListener('change', event => {
      this.environment = (event.target as HTMLInputElement).value;
      this.wantedEnvironment = this.environment;
      this.environmentError.textContent = '';
    });
    this.fillAccelerators();
    this.fillEnvironments();

    const header = element('header', { class: 'jp-Devboxes-header' });
    this.userLine = element('span', { class: 'jp-Devboxes-user', 'data-testid': 'devbox-user' });
    this.userLine.hidden = true;
    const heading = element('div', { class: 'jp-Devboxes-heading' });
    heading.append(element('h2', { class: 'jp-Devboxes-title' }, 'Devboxes'), this.userLine);
    header.append(heading, button(addIcon, 'New box', 'devbox-new', () => this.toggleForm()));
    this.statusLine = element('div', {
      class: 'jp-Devboxes-statusLine',
      'data-testid': 'devbox-watch-status',
      'aria-live': 'polite'
    });
    this.staleDetail = element('div', {
      class: 'jp-Devboxes-staleDetail',
      'data-testid': 'devbox-stale-detail'
    });
    this.kernelList = element('ul', {
      class: 'jp-Devboxes-kernels',
      'data-testid': 'devbox-kernels',
      'aria-label': 'Devbox kernel starts'
    });
    this.boxList = element('ul', {
      class: 'jp-Devboxes-list',
      'data-testid': 'devbox-list',
      'aria-label': 'Devboxes'
    });
    // The state of the list comes first: a list that is out of date says so where the
    // eye lands, not under the boxes.
    this.statusBox = element('div', { class: 'jp-Devboxes-status' });
    // One line per cluster that did not answer, on a server of several.
    this.clusterLines = element('ul', {
      class: 'jp-Devboxes-clusterLines',
      'data-testid': 'devbox-cluster-lines'
    });
    this.statusBox.append(this.statusLine, this.staleDetail, this.clusterLines);
    this.clusterSelect = select('devbox-cluster', 'Cluster');
    this.clusterSelect.addEventListener('change', () => {
      this.selected = this.clusterSelect.value;
      this.createdLine.textContent = '';
      if (this.view) {
        this.render(this.view);
      }
    });
    this.clusterBar = element('div', { class: 'jp-Devboxes-clusterBar' });
    this.clusterBar.append(
      element('span', { class: 'jp-Devboxes-fieldLabel' }, 'Cluster'),
      this.clusterSelect
    );
    this.clusterBar.hidden = true;
    this.clearFailures = button(closeIcon, 'Clear failures', 'devbox-kernels-clear', () =>
      this.act('clear the failed starts', dismissFailedKernels)
    );
    this.clearFailures.title = 'Dismiss every failed kernel start';
    this.clearFailures.classList.add('jp-Devboxes-clearFailures');
    this.clearFailures.hidden = true;
    this.node.append(
      header,
      this.clusterBar,
      this.statusBox,
      this.form,
      this.clearFailures,
      this.kernelList,
      this.boxList
    );
    void this.follow();
  }

  /**
   * Once the first view says whether this server serves one controller or several
   * clusters: the catalog and the user of the one, or of each cluster.
   */
  private begin(view: IView | null): void {
    if (view?.clusters) {
      void this.showUsers();
      return;
    }
    void this.loadCapabilities();
    void this.showUser();
  }

  /** Opens the create form (the launcher tile's way in). */
  showForm(): void {
    this.form.hidden = false;
    this.nameInput.focus();
  }

  private toggleForm(): void {
    if (this.form.hidden) {
      this.showForm();
    } else {
      this.form.hidden = true;
    }
  }

  /**
   * Names the person this Lab acts as, whose boxes the list holds; nothing for the
   * operator's token, which is no one in particular. Without an answer the line stays
   * empty: the list and its errors say what matters.
   */
  private async showUser(): Promise<void> {
    let user: string;
    try {
      user = (await getWhoAmI()).user;
    } catch {
      return;
    }
    if (user !== OPERATOR) {
      this.userLine.textContent = `as ${user}`;
      this.userLine.title = `The boxes of ${user}`;
      this.userLine.hidden = false;
    }
  }

  /** The person each cluster takes this Lab for: "as ada", or "as ada on lab-a, ...". */
  private async showUsers(): Promise<void> {
    let answers;
    try {
      answers = (await getWhoAmIEverywhere()).answers;
    } catch {
      return;
    }
    const people = answers.filter(a => a.value.user !== OPERATOR);
    const names = new Set(people.map(a => a.value.user));
    if (names.size === 0) {
      return;
    }
    this.userLine.textContent =
      names.size === 1
        ? `as ${people[0].value.user}`
        : `as ${people.map(a => `${a.value.user} on ${a.cluster}`).join(', ')}`;
    this.userLine.title = `The boxes of ${Array.from(names).join(', ')}`;
    this.userLine.hidden = false;
  }

  private async loadCapabilities(): Promise<void> {
    try {
      this.capabilities = await getCapabilities();
    } catch (error) {
      this.errorBox.textContent = `Could not load the accelerator catalog: ${(error as Error).message}`;
      return;
    }
    this.fillAccelerators();
    this.fillEnvironments();
    // Kernel starts listed before the catalog came are titled by profile name until then.
    if (this.view) {
      this.render(this.view);
    }
  }

  /** The environment choice, shown only when the operator publishes image profiles. */
  /** The clusters the sidebar shows: the one chosen, or every one. */
  private shownClusters(): IClusterView[] {
    const clusters = this.clusters ?? [];
    return this.selected === ALL_CLUSTERS ? clusters : clusters.filter(c => c.name === this.selected);
  }

  /** The image profiles a create may name: of the catalog, or of the clusters shown. */
  private imageProfiles(): ImageProfile[] {
    if (this.clusters === null) {
      const images = this.capabilities?.images;
      return images?.enabled ? (images.profiles ?? []) : [];
    }
    const byName = new Map<string, ImageProfile>();
    // With every cluster shown, not of one that did not answer: a create cannot go there.
    const every = this.selected === ALL_CLUSTERS;
    for (const cluster of this.shownClusters().filter(c => !every || c.error === null)) {
      const images = cluster.capabilities?.images;
      for (const profile of images?.enabled ? (images.profiles ?? []) : []) {
        if (!byName.has(profile.name)) {
          byName.set(profile.name, profile);
        }
      }
    }
    return Array.from(byName.values());
  }

  private fillEnvironments(): void {
    const profiles = this.imageProfiles();
    if (this.clusters !== null && profiles.some(p => p.name === this.wantedEnvironment)) {
      this.environment = this.wantedEnvironment;
    }
    if (!profiles.some(p => p.name === this.environment)) {
      this.environment = '';
    }
    this.environmentGroup.hidden = profiles.length === 0;
    this.environmentGroup.replaceChildren(
      element('legend', { class: 'jp-Devboxes-fieldLabel' }, 'Environment'),
      this.radio('environment', '', 'default', DEFAULT_ENVIRONMENT, this.environment),
      ...profiles.map(profile =>
        this.radio(
          'environment',
          profile.name,
          profile.name,
          environmentChoiceLabel(profile),
          this.environment,
          profile.description ?? undefined
        )
      )
    );
  }

  /**
   * The accelerators of the catalog, each with its free count; on a server of several
   * clusters, of the cluster shown, or of every cluster with each one's own count.
   */
  private accelerators(): IAccelerators {
    if (this.clusters === null) {
      const gpu = this.capabilities?.gpu;
      return {
        enabled: gpu?.enabled,
        profiles: gpu?.enabled ? (gpu.profiles ?? []) : [],
        label: profile => profileLabel(profile, this.view?.availability, this.view?.when)
      };
    }
    const shown = this.shownClusters().filter(c => c.capabilities);
    if (this.selected !== ALL_CLUSTERS) {
      const [cluster] = shown;
      const gpu = cluster?.capabilities?.gpu;
      return {
        enabled: gpu?.enabled,
        profiles: gpu?.enabled ? (gpu.profiles ?? []) : [],
        label: profile => profileLabel(profile, cluster?.availability, cluster?.when)
      };
    }
    // Every cluster's offer of each profile, by name, in the configuration's order; not
    // of a cluster that did not answer, whose counts are not as things stand.
    const offers = new Map<string, IClusterOffer[]>();
    for (const cluster of shown.filter(c => c.error === null)) {
      const gpu = cluster.capabilities?.gpu;
      for (const profile of gpu?.enabled ? (gpu.profiles ?? []) : []) {
        const offer = { cluster: cluster.name, profile, availability: cluster.availability };
        offers.set(profile.name, [...(offers.get(profile.name) ?? []), offer]);
      }
    }
    const answering = shown.filter(c => c.error === null);
    return {
      enabled: answering.length === 0 ? undefined : answering.some(c => c.capabilities?.gpu?.enabled),
      profiles: Array.from(offers.values()).map(each => each[0].profile),
      label: profile => {
        const { head, counts, tail } = clustersProfileParts(offers.get(profile.name) ?? []);
        const parts: Node[] = [document.createTextNode(head)];
        counts.forEach((count, index) => {
          if (index > 0) {
            parts.push(document.createTextNode(' · '));
          }
          parts.push(element('span', { class: 'jp-Devboxes-clusterCount' }, count));
        });
        parts.push(document.createTextNode(tail));
        return parts;
      }
    };
  }

  private fillAccelerators(): void {
    const catalog = this.accelerators();
    const gpu = { enabled: catalog.enabled };
    const profiles = catalog.profiles;
    if (this.clusters !== null && profiles.some(p => p.name === this.wantedAccelerator)) {
      this.accelerator = this.wantedAccelerator;
    }
    if (!profiles.some(p => p.name === this.accelerator)) {
      this.accelerator = '';
    }
    this.acceleratorGroup.replaceChildren(
      element('legend', { class: 'jp-Devboxes-fieldLabel' }, 'Accelerator'),
      this.radio('accelerator', '', 'cpu', CPU_ONLY, this.accelerator),
      ...profiles.map(profile =>
        this.radio(
          'accelerator',
          profile.name,
          profile.name,
          catalog.label(profile),
          this.accelerator,
          profile.description ?? undefined
        )
      )
    );
    this.acceleratorGroup.disabled = gpu.enabled === false;
    this.describeAccelerator();
  }

  private radio(
    group: 'accelerator' | 'environment',
    value: string,
    key: string,
    label: string | Node[],
    chosen: string,
    description?: string
  ): HTMLLabelElement {
    const testid = `devbox-${group}-${key}`;
    const input = element('input', {
      type: 'radio',
      name: `${this.id}-${group}`,
      value,
      'data-testid': testid
    });
    input.checked = value === chosen;
    const option = element('label', { class: 'jp-Devboxes-choice' });
    const text = element('span', {
      class: 'jp-Devboxes-choiceLabel',
      'data-testid': `${testid}-label`
    });
    text.append(...(typeof label === 'string' ? [label] : label));
    option.append(input, text);
    if (description) {
      option.title = description;
    }
    return option;
  }

  private describeAccelerator(): void {
    const catalog = this.accelerators();
    if (catalog.enabled === false) {
      this.acceleratorHelp.textContent = GPU_DISABLED_NOTE;
      return;
    }
    const chosen = catalog.profiles.find(p => p.name === this.accelerator);
    this.acceleratorHelp.textContent = chosen
      ? chosen.description || profileLabel(chosen)
      : CPU_NOTE;
  }

  private async create(): Promise<void> {
    this.errorBox.textContent = '';
    this.environmentError.textContent = '';
    const ttl = Number(this.ttlInput.value);
    if (!Number.isInteger(ttl) || ttl < 1) {
      this.errorBox.textContent = 'Auto-stop must be a whole number of hours, at least 1.';
      return;
    }
    const profile = this.accelerator;
    this.createButton.disabled = true;
    this.createdLine.textContent = '';
    const body: DevboxCreate = {
      name: this.nameInput.value,
      preset: this.presetSelect.value as (typeof PRESETS)[number],
      ttl_hours: ttl,
      gpu: profile ? { profile } : null,
      image: this.environment || null
    };
    try {
      // The server checks the name with the API's own rule and says what is wrong.
      if (this.clusters === null) {
        await createDevbox(body);
      } else {
        // Every cluster shown: where the profile has a device free, said with why.
        const cluster = this.selected === ALL_CLUSTERS ? AUTO_CLUSTER : this.selected;
        this.createdLine.textContent = createdLine(await createDevboxOn(body, cluster));
      }
      this.nameInput.value = '';
    } catch (error) {
      const refusal = error instanceof DevboxesApiError ? error.fields.image : undefined;
      if (refusal) {
        this.environmentError.textContent = refusal;
      } else {
        this.errorBox.textContent = (error as Error).message;
      }
    } finally {
      this.createButton.disabled = this.stale !== null;
    }
  }

  private async follow(): Promise<void> {
    let after = -1;
    let begun = false;
    while (!this.isDisposed) {
      try {
        const view = await watch(after, after < 0 ? 0 : WATCH_SECONDS);
        after = view.version;
        if (!begun) {
          begun = true;
          this.begin(view);
        }
        this.unanswered = null;
        this.stale = view.error;
        this.render(view);
      } catch (error) {
        if (!begun) {
          begun = true;
          this.begin(null);
        }
        this.unanswered = (error as Error).message;
        // This Jupyter server does not answer: the list is as stale as when the
        // controller is down, and acting on it would fail the same way.
        this.stale = (error as Error).message;
        this.showState();
        if (this.view) {
          this.render(this.view);
        }
        await sleep(RETRY_MS);
      }
    }
  }

  /**
   * Why the list shown is out of date on a server of several clusters: the chosen
   * cluster did not answer. With every cluster shown, each one that did not answer is a
   * line of its own instead, and the others' boxes stay live.
   */
  private silence(clusters: IClusterView[]): string | null {
    const chosen = clusters.find(c => c.name === this.selected);
    return chosen?.error ? `${chosen.name}: ${chosen.error}` : null;
  }

  private render(view: IView): void {
    if (view.clusters) {
      this.renderClusters(view, view.clusters);
      return;
    }
    const availabilityChanged =
      JSON.stringify(view.availability) !== JSON.stringify(this.view?.availability) ||
      JSON.stringify(view.when?.profiles) !== JSON.stringify(this.view?.when?.profiles);
    const countsChanged =
      JSON.stringify(view.availability?.profiles) !==
      JSON.stringify(this.view?.availability?.profiles);
    this.view = view;
    if (countsChanged) {
      this.onAvailability?.();
    }
    if (availabilityChanged) {
      this.fillAccelerators();
    }
    this.showState();
    this.renderKernels(view.kernels);
    if (view.items === null) {
      return;
    }
    this.warnStops(view.items.map(box => ({ box, cluster: null, silent: false })));
    this.boxList.classList.toggle('jp-mod-stale', this.stale !== null);
    this.boxList.replaceChildren(...view.items.map(box => this.row(box)));
    if (view.items.length === 0) {
      this.boxList.append(
        element('li', { class: 'jp-Devboxes-empty' }, 'No boxes yet. Create one with New box.')
      );
    }
  }

  /** The view of a server that serves several clusters: those chosen, each box with its cluster. */
  private renderClusters(view: IView, clusters: IClusterView[]): void {
    const countsChanged =
      JSON.stringify(view.availability?.profiles) !==
      JSON.stringify(this.view?.availability?.profiles);
    this.view = view;
    this.clusters = clusters;
    if (countsChanged) {
      this.onAvailability?.();
    }
    // Devbox kernels run on the default cluster: their titles come from its catalog.
    this.capabilities = clusters.find(c => c.default)?.capabilities ?? this.capabilities;
    this.fillClusterChoice(clusters);
    this.stale = this.unanswered ?? this.silence(clusters);
    const from = JSON.stringify([
      this.selected,
      this.shownClusters().map(c => [c.name, c.capabilities, c.availability, c.error === null])
    ]);
    if (from !== this.choicesFrom) {
      this.choicesFrom = from;
      this.fillAccelerators();
      this.fillEnvironments();
    }
    this.showState();
    this.renderKernels(view.kernels);
    const listed = (shown: IClusterView[]): IListed[] =>
      shown.flatMap(c =>
        (c.items ?? []).map(box => ({ box, cluster: c.name, silent: c.error !== null }))
      );
    this.warnStops(listed(clusters));
    const shown = this.shownClusters();
    if (shown.every(c => c.items === null)) {
      this.boxList.replaceChildren();
      return;
    }
    // Newest first, whichever cluster each is on.
    const boxes = listed(shown).sort(
      (a, b) => Date.parse(b.box.created_at) - Date.parse(a.box.created_at)
    );
    this.boxList.classList.toggle('jp-mod-stale', this.stale !== null);
    this.boxList.replaceChildren(...boxes.map(entry => this.row(entry.box, entry)));
    if (boxes.length === 0) {
      this.boxList.append(
        element('li', { class: 'jp-Devboxes-empty' }, 'No boxes yet. Create one with New box.')
      );
    }
  }

  /** "All clusters" and each cluster's name; the choice stays while its cluster does. */
  private fillClusterChoice(clusters: IClusterView[]): void {
    this.clusterBar.hidden = false;
    if (this.selected !== ALL_CLUSTERS && !clusters.some(c => c.name === this.selected)) {
      this.selected = ALL_CLUSTERS;
    }
    const names = [ALL_CLUSTERS, ...clusters.map(c => c.name)];
    const known = Array.from(this.clusterSelect.options).map(option => option.value);
    if (JSON.stringify(known) !== JSON.stringify(names)) {
      this.clusterSelect.replaceChildren(
        element('option', { value: ALL_CLUSTERS }, 'All clusters'),
        ...clusters.map(c =>
          element('option', { value: c.name }, c.default ? `${c.name} (default)` : c.name)
        )
      );
    }
    this.clusterSelect.value = this.selected;
  }

  /** The time of the list shown: the chosen cluster's, or the latest of every one's. */
  private observedAt(): string | null | undefined {
    if (this.clusters === null) {
      return this.view?.observed_at;
    }
    const times = this.shownClusters()
      .map(c => c.observed_at)
      .filter((at): at is string => !!at)
      .sort();
    return times.length ? times[times.length - 1] : null;
  }

  /**
   * Under the state line, with every cluster shown: one line per cluster that did not
   * answer ("lab-b: did not answer in 3 s"), and per name answered under another's.
   */
  private showClusterLines(): void {
    const lines: HTMLElement[] = [];
    if (this.clusters !== null && this.selected === ALL_CLUSTERS) {
      for (const cluster of this.clusters.filter(c => c.error)) {
        const line = element(
          'li',
          {
            class: 'jp-Devboxes-clusterLine',
            role: 'alert',
            'data-testid': `devbox-cluster-error-${cluster.name}`
          },
          `${cluster.name}: ${cluster.error}`
        );
        line.title = `The boxes of ${cluster.name} are as last seen; their actions are off until it answers.`;
        lines.push(line);
      }
      for (const note of this.view?.notes ?? []) {
        lines.push(element('li', { class: 'jp-Devboxes-clusterNote' }, note));
      }
    }
    this.clusterLines.replaceChildren(...lines);
  }

  /** On top of the list: when it was updated, or that it is out of date and why. */
  private showState(): void {
    this.showClusterLines();
    const stale = this.stale !== null;
    this.statusBox.classList.toggle('jp-mod-stale', stale);
    this.statusLine.setAttribute('data-stale', String(stale));
    this.statusLine.setAttribute('role', stale ? 'alert' : 'status');
    this.createButton.disabled = stale;
    if (stale) {
      this.statusLine.textContent = staleNotice(this.observedAt());
      this.staleDetail.textContent = this.stale;
      return;
    }
    this.staleDetail.textContent = '';
    const observed = this.observedAt();
    this.statusLine.textContent = observed
      ? `Updated ${new Date(observed).toLocaleTimeString()}`
      : 'Loading…';
  }

  private renderKernels(kernels: IKernelProgress[]): void {
    const starting = kernels.filter(k => k.phase !== 'running');
    // One failure has its own Dismiss; several go at once.
    this.clearFailures.hidden = starting.filter(k => k.phase === 'failed').length < 2;
    this.kernelList.replaceChildren(
      ...starting.map(k => {
        const item = element('li', {
          class: 'jp-Devboxes-kernel',
          'data-phase': k.phase,
          'data-testid': `devbox-kernel-${k.box}`
        });
        const head = element('div', { class: 'jp-Devboxes-kernelHead' });
        head.append(element('strong', {}, this.kernelTitle(k)));
        if (k.phase === 'failed') {
          const dismiss = button(closeIcon, 'Dismiss', `devbox-kernel-dismiss-${k.box}`, () =>
            this.act('dismiss the failed start', () => dismissKernel(k.kernel_id))
          );
          dismiss.title = 'Dismiss this failed start';
          head.append(dismiss);
        } else if (k.phase !== 'connecting') {
          // While it waits for its box, a start can still give the box back.
          const cancel = button(stopIcon, 'Cancel', `devbox-kernel-cancel-${k.box}`, () =>
            this.act('cancel the kernel start', () => dismissKernel(k.kernel_id))
          );
          cancel.title = 'Cancel this kernel start and give back a box it started';
          head.append(cancel);
        }
        const message = element('span', { class: 'jp-Devboxes-kernelMessage' }, k.message);
        if (k.phase !== 'failed') {
          // Counted on in the page from the seconds the answer carried, so the clocks of
          // the browser and the server never need to agree.
          const elapsed = element('span', {
            class: 'jp-Devboxes-elapsed',
            'data-testid': `devbox-kernel-elapsed-${k.box}`,
            'data-step': String(k.step_seconds ?? 0),
            'data-total': String(k.total_seconds ?? 0),
            'data-at': String(performance.now())
          });
          message.append(' ', elapsed);
        }
        item.append(head, message);
        return item;
      })
    );
    this.tickElapsed();
    this.notify(kernels);
    this.onKernels?.(kernels);
  }

  dispose(): void {
    if (this.elapsedTimer !== null) {
      window.clearInterval(this.elapsedTimer);
      this.elapsedTimer = null;
    }
    super.dispose();
  }

  /** The seconds of each kernel start on its way, counted on since its answer came. */
  private tickElapsed(): void {
    const spans = Array.from(this.kernelList.querySelectorAll<HTMLElement>('.jp-Devboxes-elapsed'));
    for (const span of spans) {
      const since = (performance.now() - Number(span.dataset.at)) / 1000;
      span.textContent = elapsedLabel(
        Number(span.dataset.step) + since,
        Number(span.dataset.total) + since
      );
    }
    if (spans.length > 0 && this.elapsedTimer === null) {
      this.elapsedTimer = window.setInterval(() => this.tickElapsed(), 1000);
    } else if (spans.length === 0 && this.elapsedTimer !== null) {
      window.clearInterval(this.elapsedTimer);
      this.elapsedTimer = null;
    }
  }

  /**
   * A notification per stop the controller warned of, with an Extend button, wherever the
   * user is; gone once the stop moved (an extend, new activity) or the box stopped.
   */
  private warnStops(boxes: IListed[]): void {
    const warned = new Set<string>();
    for (const { box, cluster } of boxes) {
      const warning = box.stop_warning;
      if (!warning || box.state === 'stopped') {
        continue;
      }
      const key = `${boxKey(box.name, cluster)} ${warning.reason} ${warning.stops_at}`;
      warned.add(key);
      if (this.stopNotices.has(key)) {
        continue;
      }
      const name = box.name;
      // The first sentence (when and why) fits a notification; the rest tells a shell
      // user how to extend, which the button does here.
      const [when] = warning.message.split('. ');
      const sentence = when.endsWith('.') ? when : `${when}.`;
      const id = Notification.warning(cluster ? `${cluster}: ${sentence}` : sentence, {
        autoClose: false,
        actions: [
          {
            label: 'Extend 1 h',
            caption: `Keep ${name} running an hour longer`,
            displayType: 'accent',
            callback: () =>
              void this.act(`extend ${name}`, () => extendDevbox(name, 1, cluster))
          }
        ]
      });
      this.stopNotices.set(key, id);
    }
    for (const [key, id] of this.stopNotices) {
      if (!warned.has(key)) {
        Notification.dismiss(id);
        this.stopNotices.delete(key);
      }
    }
  }

  /** A JupyterLab notification per kernel start, so progress shows wherever the user is. */
  private notify(kernels: IKernelProgress[]): void {
    if (this.knownKernels === null) {
      this.knownKernels = new Set(kernels.filter(k => k.phase === 'failed').map(k => k.kernel_id));
    }
    const seen = new Set<string>();
    for (const k of kernels) {
      seen.add(k.kernel_id);
      if (this.knownKernels.has(k.kernel_id)) {
        continue;
      }
      const text = `${this.kernelTitle(k)}: ${k.message}`;
      const id = this.notices.get(k.kernel_id);
      const type = k.phase === 'failed' ? 'error' : k.phase === 'running' ? 'success' : 'in-progress';
      const autoClose = type === 'in-progress' ? false : 5000;
      if (id === undefined) {
        if (type !== 'success') {
          this.notices.set(k.kernel_id, Notification.emit(text, type, { autoClose }));
        }
      } else {
        Notification.update({ id, message: text, type, autoClose });
      }
    }
    for (const [kernel, id] of this.notices) {
      if (!seen.has(kernel)) {
        Notification.dismiss(id);
        this.notices.delete(kernel);
      }
    }
  }

  /**
   * Told when the free counts change: the server then offers devbox kernels for the
   * profiles some node serves, which the Launcher shows once it asks again.
   */
  onAvailability: (() => void) | null = null;

  /** Told every devbox kernel start, each time the watch brings them. */
  onKernels: ((kernels: IKernelProgress[]) => void) | null = null;

  /** A start's kernel as the Launcher names it, e.g. "Python 3 on NVIDIA L4 (devbox)". */
  kernelTitle(progress: IKernelProgress): string {
    return kernelTitle(progress.profile, this.capabilities?.gpu?.profiles ?? []);
  }

  /**
   * One box; on a server of several clusters `listed` names its cluster, where its
   * actions go, and says whether that cluster did not answer the latest listing.
   */
  private row(box: Devbox, listed?: IListed): HTMLLIElement {
    const cluster = listed?.cluster ?? null;
    const key = boxKey(box.name, cluster);
    const item = element('li', {
      class: 'jp-Devboxes-box',
      'data-state': box.state,
      'data-testid': `devbox-row-${key}`,
      title: detail(box, cluster ?? undefined).join('\n')
    });
    item.classList.toggle('jp-mod-stale', listed?.silent === true);
    const open = this.expanded.has(key);
    const head = element('div', { class: 'jp-Devboxes-boxHead' });
    const toggle = element('button', {
      type: 'button',
      class: 'jp-Button jp-mod-minimal jp-Devboxes-toggle',
      'aria-expanded': String(open),
      'aria-label': `${open ? 'Hide' : 'Show'} details of ${box.name}`,
      title: open ? 'Hide details' : 'Show details'
    });
    toggle.append((open ? caretDownIcon : caretRightIcon).element({ tag: 'span', elementSize: 'small' }));
    toggle.addEventListener('click', () => {
      if (open) {
        this.expanded.delete(key);
      } else {
        this.expanded.add(key);
      }
      if (this.view) {
        this.render(this.view);
      }
    });
    head.append(toggle, element('span', { class: 'jp-Devboxes-boxName' }, box.name));
    if (cluster) {
      head.append(
        element(
          'span',
          {
            class: 'jp-Devboxes-cluster',
            title: `On cluster ${cluster}`,
            'data-testid': `devbox-cluster-${key}`
          },
          cluster
        )
      );
    }
    head.append(
      element('span', { class: 'jp-Devboxes-state', 'data-testid': `devbox-state-${key}` }, box.state)
    );
    const facts = element('div', { class: 'jp-Devboxes-facts' });
    facts.append(element('span', {}, allocationLabel(box.gpu)));
    // What a DRA box actually got, which its profile may leave open (one of alternatives).
    const allocated = allocatedLabel(box.gpu?.allocated);
    if (allocated) {
      const testid = `devbox-row-allocated-${box.name}`;
      facts.append(element('span', { 'data-testid': testid }, `allocated ${allocated}`));
    }
    if (box.image) {
      facts.append(
        element('span', { 'data-testid': `devbox-row-environment-${key}` }, environmentLabel(box.image))
      );
    }
    // A ready box's declared ports open on the dashboard (its cluster's), which hands the
    // browser over to the port's own origin; never with the Lab as the new tab's opener.
    const dashboard = cluster
      ? this.clusters?.find(c => c.name === cluster)?.dashboard_url
      : this.view?.dashboard_url;
    const ports = box.state === 'ready' && box.image && dashboard ? (box.image.ports ?? []) : [];
    for (const port of ports.filter(p => (p.protocol ?? 'TCP') === 'TCP')) {
      const path = `/dashboard/devboxes/${encodeURIComponent(box.name)}/ports/${port.container_port}/`;
      facts.append(
        element(
          'a',
          {
            href: `${dashboard}${path}`,
            target: '_blank',
            rel: 'noopener noreferrer',
            'data-testid': `devbox-preview-${key}-${port.container_port}`
          },
          `Open ${port.name} (${port.container_port})`
        )
      );
    }
    if (box.state !== 'stopped') {
      facts.append(element('span', {}, `auto-stop ${autoStopLabel(box)}`));
    }
    const why = element(
      'div',
      { class: 'jp-Devboxes-reason', 'data-testid': `devbox-status-${key}` },
      reason(box)
    );
    const actions = element('div', { class: 'jp-Devboxes-actions' });
    if (box.state === 'stopped') {
      actions.append(
        button(runIcon, 'Start', `devbox-start-${key}`, () =>
          this.act(`start ${key}`, () => changeDevbox(box.name, 'start', cluster))
        )
      );
    } else {
      actions.append(
        button(stopIcon, 'Stop', `devbox-stop-${key}`, () =>
          this.act(`stop ${key}`, () => changeDevbox(box.name, 'stop', cluster))
        )
      );
    }
    if (box.ssh_command) {
      const command = box.ssh_command;
      actions.append(
        button(copyIcon, 'Copy SSH', `devbox-ssh-${key}`, () => {
          Clipboard.copyToSystem(command);
          Notification.info(`Copied: ${command}`, { autoClose: 3000 });
        })
      );
    }
    actions.append(
      button(deleteIcon, 'Delete', `devbox-delete-${key}`, () => void this.remove(box.name, cluster))
    );
    if (this.stale !== null || listed?.silent) {
      // Copy SSH needs no controller; the rest would fail until it answers again.
      for (const action of Array.from(actions.querySelectorAll<HTMLButtonElement>('button'))) {
        if (!action.dataset.testid?.startsWith('devbox-ssh-')) {
          action.disabled = true;
          action.title = `${action.title} (off: the controller is unreachable)`;
        }
      }
    }
    item.append(head, facts, why, actions);
    if (open) {
      const more = element('pre', {
        class: 'jp-Devboxes-detail',
        'data-testid': `devbox-detail-${key}`
      });
      more.textContent = detail(box, cluster ?? undefined).join('\n');
      item.append(more);
    }
    return item;
  }

  private async act(what: string, action: () => Promise<unknown>): Promise<void> {
    try {
      await action();
    } catch (error) {
      Notification.error(`Could not ${what}: ${(error as Error).message}`, { autoClose: 8000 });
    }
  }

  private async remove(name: string, cluster: string | null = null): Promise<void> {
    // On a server of several clusters the dialogs say which cluster's box goes.
    const which = cluster ? `${name} on ${cluster}` : name;
    const choice = await showDialog({
      title: `Delete ${which}?`,
      body: 'Delete keeps the home volume, so a box of the same name gets it back. Purge deletes the volume too, for good.',
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({ label: 'Purge…', ariaLabel: 'Delete and purge the volume' }),
        Dialog.warnButton({ label: 'Delete', ariaLabel: 'Delete, keep the volume' })
      ]
    });
    if (!choice.button.accept) {
      return;
    }
    const purge = choice.button.label === 'Purge…';
    if (purge) {
      const typed = await InputDialog.getText({
        title: `Type ${name} to delete its volume${cluster ? ` on ${cluster}` : ''} for good`,
        placeholder: name,
        okLabel: 'Purge'
      });
      if (!typed.button.accept) {
        return;
      }
      if ((typed.value ?? '').trim() !== name) {
        Notification.warning(`Not purged: the name typed was not ${name}.`, { autoClose: 5000 });
        return;
      }
    }
    await this.act(`delete ${which}`, () => deleteDevbox(name, purge, cluster));
  }
}
