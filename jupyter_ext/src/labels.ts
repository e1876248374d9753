import { IAvailability, IDevbox, IGpuProfile } from './api';

export const CPU_ONLY = 'CPU only';

/**
 * "NVIDIA L4 — 1 of 2 free" when the controller reports availability, else
 * "NVIDIA L4 · 1 × nvidia.com/gpu"; "(default)" marks the operator's default.
 */
export function profileLabel(profile: IGpuProfile, availability?: IAvailability | null): string {
  const free = availability?.profiles?.find(p => p.name === profile.name);
  let label: string;
  if (free && Number.isFinite(free.available) && Number.isFinite(free.capacity)) {
    label = `${profile.display_name} — ${free.available} of ${free.capacity} free`;
    if (free.waiting > 0) {
      label += `, ${free.waiting} waiting`;
    }
  } else {
    label = `${profile.display_name} · ${profile.count} × ${profile.resource_name}`;
  }
  return profile.default ? `${label} (default)` : label;
}

/** The one-line reason of a box: the controller's summary when it has one. */
export function reason(devbox: IDevbox): string {
  return devbox.summary || devbox.message || '';
}

/** "auto-stop in 5 h", "auto-stop in 20 min", or "" when the box has no deadline. */
export function autoStop(devbox: IDevbox, now: number = Date.now()): string {
  if (!devbox.expires_at || devbox.state === 'stopped') {
    return '';
  }
  const minutes = Math.round((Date.parse(devbox.expires_at) - now) / 60000);
  if (!Number.isFinite(minutes)) {
    return '';
  }
  if (minutes <= 0) {
    return 'auto-stop due';
  }
  return minutes < 90
    ? `auto-stop in ${minutes} min`
    : `auto-stop in ${Math.round(minutes / 60)} h`;
}

/** Everything known about a box, one fact a line, for the hover text and the expander. */
export function detail(devbox: IDevbox): string[] {
  const lines = [`${devbox.name}: ${devbox.state}`];
  if (devbox.message) {
    lines.push(devbox.message);
  }
  if (devbox.scheduling_detail && devbox.scheduling_detail !== devbox.message) {
    lines.push(devbox.scheduling_detail);
  }
  lines.push(`accelerator: ${devbox.gpu ? devbox.gpu.display_name : CPU_ONLY}`);
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
  if (devbox.expires_at) {
    lines.push(`auto-stop at: ${devbox.expires_at}`);
  }
  return lines;
}

/** "starting — Scheduling blocked: ...": the state, then the controller's message if any. */
export function statusLine(devbox: IDevbox): string {
  return devbox.message ? `${devbox.state} — ${devbox.message}` : devbox.state;
}

const NAME_RE = /^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/;

/** Returns the normalized name, or throws with the rule the name broke. */
export function normalizeName(value: string): string {
  const name = value.trim().toLowerCase();
  if (!NAME_RE.test(name)) {
    throw new Error(
      `invalid name '${value}': use 1-40 characters of lowercase letters, digits and '-', ` +
        'starting and ending with a letter or digit'
    );
  }
  return name;
}
