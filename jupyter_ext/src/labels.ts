/**
 * How boxes, accelerators and kernels read in the sidebar: the same words as the
 * Python widgets (devboxes_jupyter/labels.py) and the kernelspecs.
 */
import {
  Devbox,
  GpuAllocation,
  GpuAvailability,
  GpuProfile,
  ProfileAvailability
} from './api';

export const CPU_ONLY = 'CPU only';
export const GPU_DISABLED_NOTE =
  'GPU acceleration is disabled by the operator: new boxes get CPU only.';
export const CPU_NOTE = 'No accelerator: the box gets CPU and memory only.';

function unitsLabel(accelerator: GpuProfile | GpuAllocation): string {
  return `${accelerator.display_name} · ${accelerator.count} × ${accelerator.resource_name}`;
}

/**
 * "NVIDIA L4 · 1 × nvidia.com/gpu", then " — 1 of 2 free, 1 waiting" when the controller
 * counts free devices, and " (default)" for the operator's default profile.
 */
export function profileLabel(profile: GpuProfile, availability?: GpuAvailability | null): string {
  let label = unitsLabel(profile);
  const free = availability?.profiles?.find(p => p.name === profile.name);
  if (free) {
    label += freeText(free);
  }
  return profile.default ? `${label} (default)` : label;
}

/** " — 1 of 2 free, 1 waiting", or " — free count unknown" when the controller cannot count. */
function freeText(entry: ProfileAvailability): string {
  if (typeof entry.available !== 'number' || typeof entry.capacity !== 'number') {
    return ' — free count unknown';
  }
  const waiting = entry.waiting > 0 ? `, ${entry.waiting} waiting` : '';
  return ` — ${entry.available} of ${entry.capacity} free${waiting}`;
}

/** The accelerator pinned to a box, in the same words as its profile's label. */
export function allocationLabel(gpu: GpuAllocation | null | undefined): string {
  return gpu ? unitsLabel(gpu) : CPU_ONLY;
}

/** The one-line reason of a box: the controller's summary when it has one. */
export function reason(devbox: Devbox): string {
  return devbox.summary || devbox.message || '';
}

/** "starting — Scheduling blocked: ...": the state, then the controller's words if any. */
function statusLine(devbox: Devbox): string {
  const message = (devbox.message ?? '').trim();
  return message ? `${devbox.state} — ${message}` : devbox.state;
}

function span(seconds: number): string {
  let minutes = Math.max(Math.floor(seconds / 60), 1);
  const days = Math.floor(minutes / (24 * 60));
  minutes -= days * 24 * 60;
  const hours = Math.floor(minutes / 60);
  minutes -= hours * 60;
  if (days) {
    return hours ? `${days} d ${hours} h` : `${days} d`;
  }
  if (hours) {
    return minutes ? `${hours} h ${minutes} min` : `${hours} h`;
  }
  return `${minutes} min`;
}

/** When a running box stops on its own: "in 3 h 20 min", "due now" or "never". */
export function autoStopLabel(devbox: Devbox, now: number = Date.now()): string {
  if (devbox.state === 'stopped') {
    return 'stopped';
  }
  if (!devbox.expires_at) {
    return 'never';
  }
  const remaining = Math.floor((Date.parse(devbox.expires_at) - now) / 1000);
  return remaining <= 0 ? 'due now' : `in ${span(remaining)}`;
}

/** "Python 3 on NVIDIA L4 (devbox)", as the kernelspec of that profile is named. */
export function kernelTitle(profileName: string, profiles: GpuProfile[]): string {
  const where = profileName
    ? (profiles.find(p => p.name === profileName)?.display_name ?? profileName)
    : 'CPU';
  return `Python 3 on ${where} (devbox)`;
}

/** Everything known about a box, one fact a line, for the hover text and the expander. */
export function detail(devbox: Devbox): string[] {
  const lines = [`${devbox.name}: ${statusLine(devbox)}`];
  if (devbox.scheduling_detail && devbox.scheduling_detail !== devbox.message) {
    lines.push(devbox.scheduling_detail);
  }
  lines.push(`accelerator: ${allocationLabel(devbox.gpu)}`);
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
