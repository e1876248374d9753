/**
 * How boxes, accelerators and kernels read in the sidebar: the same words as the
 * Python widgets (devboxes_jupyter/labels.py) and the kernelspecs. The words the
 * dashboard shows too come from words.ts.
 */
import { Devbox, GpuAvailability, GpuProfile, GpuWhen, ICreated } from './api';
import {
  allocatedLabel,
  allocationLabel,
  autoStopLabel,
  environmentLabel,
  freeText,
  nextFreeLabel,
  unitsLabel
} from './words';

export { unitsLabel } from './words';

export {
  allocatedLabel,
  allocationLabel,
  autoStopLabel,
  CPU_ONLY,
  DEFAULT_ENVIRONMENT,
  elapsedLabel,
  environmentChoiceLabel,
  environmentLabel,
  reason,
  staleNotice
} from './words';

export const GPU_DISABLED_NOTE =
  'GPU acceleration is disabled by the operator: new boxes get CPU only.';
export const CPU_NOTE = 'No accelerator: the box gets CPU and memory only.';

/**
 * "NVIDIA L4 · 1 × nvidia.com/gpu", then " — 1 of 2 free, 1 waiting" when the controller
 * counts free devices, and " (default)" for the operator's default profile.
 */
export function profileLabel(
  profile: GpuProfile,
  availability?: GpuAvailability | null,
  when?: GpuWhen | null
): string {
  let label = unitsLabel(profile);
  const free = availability?.profiles?.find(p => p.name === profile.name);
  if (free) {
    label += freeText(free);
  }
  const next = when?.profiles?.find(p => p.name === profile.name);
  if (when && next) {
    label += ` · next free: ${nextFreeLabel(next, when.observed_at)}`;
  }
  return profile.default ? `${label} (default)` : label;
}

/** One cluster's offer of a profile, for the label of a choice across clusters. */
export interface IClusterOffer {
  cluster: string;
  profile: GpuProfile;
  availability?: GpuAvailability | null;
}

/** A profile as several clusters offer it, in parts: see {@link clustersProfileLabel}. */
export function clustersProfileParts(offers: IClusterOffer[]): {
  head: string;
  counts: string[];
  tail: string;
} {
  const counts = offers.map(offer => {
    const free = offer.availability?.profiles?.find(p => p.name === offer.profile.name);
    // The same words as one cluster's count, after its " — ".
    return `${offer.cluster}: ${free ? freeText(free).replace(/^ — /, '') : 'free count unknown'}`;
  });
  const defaults = offers.filter(offer => offer.profile.default).map(offer => offer.cluster);
  let tail = '';
  if (defaults.length === offers.length) {
    tail = ' (default)';
  } else if (defaults.length > 0) {
    tail = ` (default on ${defaults.join(', ')})`;
  }
  return { head: `${unitsLabel(offers[0].profile)} — `, counts, tail };
}

/**
 * A profile as several clusters offer it: "Pool GPU · 1 × example.com/gpu — lab-a: 0 of 2
 * free · lab-b: 1 of 1 free", each cluster's own count (never summed), and " (default)"
 * when it is every offering cluster's default (else " (default on lab-a)").
 */
export function clustersProfileLabel(offers: IClusterOffer[]): string {
  const { head, counts, tail } = clustersProfileParts(offers);
  return `${head}${counts.join(' · ')}${tail}`;
}

/** "Created atlas on lab-b: pool-gpu has 1 free now": where a create went and why. */
export function createdLine(made: ICreated): string {
  const why = made.reason.startsWith(`${made.cluster}: `)
    ? made.reason
    : `${made.cluster}: ${made.reason}`;
  return `Created ${made.box.name} on ${why}`;
}

/** "starting — Scheduling blocked: ...": the state, then the controller's words if any. */
function statusLine(devbox: Devbox): string {
  const message = (devbox.message ?? '').trim();
  return message ? `${devbox.state} — ${message}` : devbox.state;
}

/** "Python 3 on NVIDIA L4 (devbox)", as the kernelspec of that profile is named. */
export function kernelTitle(profileName: string, profiles: GpuProfile[]): string {
  const where = profileName
    ? (profiles.find(p => p.name === profileName)?.display_name ?? profileName)
    : 'CPU';
  return `Python 3 on ${where} (devbox)`;
}

/**
 * Everything known about a box, one fact a line, for the hover text and the expander;
 * with the cluster it is on, on a server of several.
 */
export function detail(devbox: Devbox, cluster?: string): string[] {
  const lines = [`${devbox.name}: ${statusLine(devbox)}`];
  if (cluster) {
    lines.push(`cluster: ${cluster}`);
  }
  if (devbox.scheduling_detail && devbox.scheduling_detail !== devbox.message) {
    lines.push(devbox.scheduling_detail);
  }
  lines.push(`accelerator: ${allocationLabel(devbox.gpu)}`);
  const allocated = allocatedLabel(devbox.gpu?.allocated);
  if (allocated) {
    lines.push(`allocated: ${allocated}`);
  }
  lines.push(`environment: ${environmentLabel(devbox.image)}`);
  lines.push(`preset: ${devbox.preset}`);
  if (devbox.ssh_command) {
    lines.push(`ssh: ${devbox.ssh_command}`);
  }
  if (devbox.pod_name) {
    lines.push(`pod: ${devbox.pod_name}`);
  }
  if (devbox.repository) {
    lines.push(`repository: ${devbox.repository}`);
  }
  lines.push(`created: ${devbox.created_at}`);
  lines.push(`auto-stop: ${autoStopLabel(devbox)}`);
  return lines;
}
