/**
 * The display words the Lab's sidebar and the controller's dashboard share: how an
 * accelerator, the devices a box got, its free count and a box's auto-stop time read.
 * This file is their one source: the dashboard's static/labels.js is generated from it
 * (`make labels`), and the Python words (devboxes_sdk/labels.py) are checked against
 * both by tests/jupyter/test_display_words.py. Pure functions over the API's plain data,
 * so that the generated JavaScript needs nothing else.
 */
import type { components } from './openapi';

type Schemas = components['schemas'];

export const CPU_ONLY = 'CPU only';

/**
 * "NVIDIA L4 · 1 × nvidia.com/gpu": a profile and the allocation it gives read alike; a
 * DRA profile shows its devices line.
 */
export function unitsLabel(
  accelerator: Schemas['GpuProfile'] | Schemas['GpuAllocation']
): string {
  if (accelerator.kind === 'dra') {
    const devices = accelerator.devices || `${accelerator.count} × device`;
    return `${accelerator.display_name} · ${devices}`;
  }
  return `${accelerator.display_name} · ${accelerator.count} × ${accelerator.resource_name}`;
}

/** " — 1 of 2 free, 1 waiting", or " — free count unknown" when the controller cannot count. */
export function freeText(entry: Schemas['ProfileAvailability']): string {
  if (typeof entry.available !== 'number' || typeof entry.capacity !== 'number') {
    return ' — free count unknown';
  }
  const waiting = entry.waiting > 0 ? `, ${entry.waiting} waiting` : '';
  return ` — ${entry.available} of ${entry.capacity} free${waiting}`;
}

/** A coarse, human duration: "45s", "12m", "23h", "3d". */
export function duration(seconds: number): string {
  const whole = Math.floor(seconds);
  if (whole < 60) {
    return `${whole}s`;
  }
  if (whole < 3600) {
    return `${Math.floor(whole / 60)}m`;
  }
  if (whole < 2 * 86400) {
    return `${Math.floor(whole / 3600)}h`;
  }
  return `${Math.floor(whole / 86400)}d`;
}

/**
 * When a new box of a profile would get a device: "now", "within 2h" (the latest as
 * things stand), "about 2h" (an estimate) or "?"; `devbox gpu when` says why.
 */
export function nextFreeLabel(
  entry: Schemas['ProfileWhen'] | null | undefined,
  observedAt: string
): string {
  if (!entry || !entry.free_at) {
    return '?';
  }
  const seconds = (Date.parse(entry.free_at) - Date.parse(observedAt)) / 1000;
  if (seconds < 1) {
    return 'now';
  }
  return `${entry.bound ? 'within' : 'about'} ${duration(seconds)}`;
}

/**
 * "NVIDIA A100-SXM4-40GB (40Gi, alternative 1)": what a DRA box actually got, one entry
 * per allocated device; the profile's own device (alternative 0) is not marked. Empty
 * for a box without allocated devices (not DRA, or not allocated yet).
 */
export function allocatedLabel(
  devices: Schemas['AllocatedDevice'][] | null | undefined
): string {
  return (devices ?? [])
    .map(device => {
      const notes = device.memory ? [device.memory] : [];
      if (device.alternative) {
        notes.push(`alternative ${device.alternative}`);
      }
      const name = device.product || 'unnamed device';
      return notes.length ? `${name} (${notes.join(', ')})` : name;
    })
    .join(', ');
}

/** The environment of a box created without an image profile: the operator's own image. */
export const DEFAULT_ENVIRONMENT = 'Default workspace';

/**
 * An image profile as a create form offers it, with where it runs: "CUDA 12.8 workspace
 * (as the workspace)" replaces the workspace image, "Web preview (beside the workspace)"
 * runs next to it.
 */
export function environmentChoiceLabel(profile: Schemas['ImageProfile']): string {
  const where = profile.mode === 'sidecar' ? 'beside the workspace' : 'as the workspace';
  return `${profile.display_name} (${where})`;
}

/** The environment pinned to a box: its image profile's display name, or the default. */
export function environmentLabel(image: Schemas['ImageAllocation'] | null | undefined): string {
  return image ? image.display_name : DEFAULT_ENVIRONMENT;
}

/** The accelerator pinned to a box, in the same words as its profile's label. */
export function allocationLabel(gpu: Schemas['GpuAllocation'] | null | undefined): string {
  return gpu ? unitsLabel(gpu) : CPU_ONLY;
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

/** What a warned stop is for, in the words the auto-stop label uses. */
export const STOP_REASONS: Record<Schemas['StopWarning']['reason'], string> = {
  ttl: 'time to live',
  idle: 'idle'
};

function countdown(moment: string, now: number): string {
  const remaining = Math.floor((Date.parse(moment) - now) / 1000);
  return remaining <= 0 ? 'due now' : `in ${span(remaining)}`;
}

/**
 * When a running box stops on its own: "in 3 h 20 min", "due now" or "never"; a stop the
 * controller has warned of, which may come before expires_at, with its reason:
 * "in 9 min (idle)".
 */
export function autoStopLabel(
  devbox: Pick<Schemas['Devbox'], 'state' | 'expires_at' | 'stop_warning'>,
  now: number = Date.now()
): string {
  if (devbox.state === 'stopped') {
    return 'stopped';
  }
  const warning = devbox.stop_warning;
  if (warning) {
    return `${countdown(warning.stops_at, now)} (${STOP_REASONS[warning.reason]})`;
  }
  if (!devbox.expires_at) {
    return 'never';
  }
  return countdown(devbox.expires_at, now);
}

/**
 * The one line a box shows for why it is not ready: the controller's summary when it
 * sends one ("Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)"), else
 * its message, which older controllers send alone.
 */
export function reason(devbox: Pick<Schemas['Devbox'], 'summary' | 'message'>): string {
  return devbox.summary || devbox.message || '';
}

/**
 * How long a start's current step has lasted and how long since it was asked for:
 * `(4 s; 12 s in all)`, one figure while the first step lasts.
 */
export function elapsedLabel(stepSeconds: number, totalSeconds: number): string {
  const step = Math.floor(stepSeconds);
  const total = Math.floor(totalSeconds);
  return step === total ? `(${step} s)` : `(${step} s; ${total} s in all)`;
}

/** Said on top of a list the controller can no longer refresh, with how old the list is. */
export function staleNotice(observedAt: string | null | undefined, now: number = Date.now()): string {
  const age = observedAt ? Math.floor((now - Date.parse(observedAt)) / 1000) : null;
  const list =
    age === null
      ? 'No list of boxes yet'
      : `The list below is ${age < 60 ? 'less than a minute' : span(age)} old`;
  return `Controller unreachable. ${list}; actions are off until it answers again.`;
}
