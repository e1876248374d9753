import { IDevbox, IGpuProfile } from './api';

export const CPU_ONLY = 'CPU only';

/** "NVIDIA L4 · 1 × nvidia.com/gpu (default)": what a profile gives, in one line. */
export function profileLabel(profile: IGpuProfile): string {
  const label = `${profile.display_name} · ${profile.count} × ${profile.resource_name}`;
  return profile.default ? `${label} (default)` : label;
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
