import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** A profile of the operator's GPU catalog, as discovery shows it. */
export interface IGpuProfile {
  name: string;
  display_name: string;
  description?: string | null;
  resource_name: string;
  count: number;
  default: boolean;
}

export interface ICapabilities {
  gpu: {
    enabled: boolean;
    default_profile: string | null;
    profiles: IGpuProfile[];
  };
}

export interface IGpuAllocation {
  profile: string;
  display_name: string;
  resource_name: string;
  count: number;
}

export type DevboxState = 'starting' | 'ready' | 'stopped' | 'degraded';

export interface IDevbox {
  name: string;
  state: DevboxState;
  preset: string;
  created_at: string;
  expires_at: string | null;
  ssh_command: string | null;
  message: string | null;
  gpu: IGpuAllocation | null;
  pod_name?: string | null;
  repository?: string | null;
  /** One-line reason, when the controller offers it. */
  summary?: string | null;
  /** The scheduler's full account, when the controller offers it. */
  scheduling_detail?: string | null;
}

/** One profile's devices, when the controller offers `GET /api/v1/gpu/availability`. */
export interface IProfileAvailability {
  name: string;
  available: number;
  capacity: number;
  waiting: number;
}

export interface IAvailability {
  observed_at?: string;
  profiles: IProfileAvailability[];
}

/** What a devbox kernel start is doing (see devboxes_jupyter/progress.py). */
export interface IKernelProgress {
  kernel_id: string;
  box: string;
  profile: string;
  phase: string;
  message: string;
  updated: number;
}

/** The server extension's view, answered by the watch route once it changes. */
export interface IView {
  version: number;
  items: IDevbox[] | null;
  observed_at: string | null;
  error: string | null;
  availability: IAvailability | null;
  kernels: IKernelProgress[];
  poll_interval: number;
}

export interface ICreateRequest {
  name: string;
  preset: string;
  ttl_hours: number;
  gpu: { profile: string } | null;
}

/** An error answered by the server extension, with the controller's own words. */
export class DevboxesApiError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
  }
}

interface IFieldError {
  loc?: (string | number)[];
  msg: string;
}

/** Turns an error body's `detail` (a message or a list of field errors) into one sentence. */
export function describeDetail(detail: unknown): string {
  if (typeof detail === 'string') {
    return detail;
  }
  if (Array.isArray(detail)) {
    return detail
      .map((item: IFieldError) => {
        const field = (item.loc ?? []).filter(part => part !== 'body').join('.');
        return field ? `${field}: ${item.msg}` : item.msg;
      })
      .join('; ');
  }
  return 'unexpected error';
}

async function request<T>(
  path: string,
  init: RequestInit = {},
  query: Record<string, string> = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  let url = URLExt.join(settings.baseUrl, 'devboxes', 'api', path);
  const search = new URLSearchParams(query).toString();
  if (search) {
    url = `${url}?${search}`;
  }
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new DevboxesApiError(0, `Jupyter server unreachable: ${String(error)}`);
  }
  const text = await response.text();
  let body: unknown = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = null;
    }
  }
  if (!response.ok) {
    const detail =
      body && typeof body === 'object' && 'detail' in body
        ? describeDetail((body as { detail: unknown }).detail)
        : `${response.status} ${response.statusText}`;
    throw new DevboxesApiError(response.status, detail);
  }
  return body as T;
}

export function getCapabilities(): Promise<ICapabilities> {
  return request<ICapabilities>('capabilities');
}

export function createDevbox(body: ICreateRequest): Promise<IDevbox> {
  return request<IDevbox>('devboxes', {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/** The view once it is newer than `after`, or as it is after `timeoutSeconds`. */
export function watch(after: number, timeoutSeconds: number): Promise<IView> {
  return request<IView>('watch', {}, { after: String(after), timeout: String(timeoutSeconds) });
}

export function startDevbox(name: string): Promise<IDevbox> {
  return request<IDevbox>(`devboxes/${encodeURIComponent(name)}/start`, { method: 'POST' });
}

export function stopDevbox(name: string): Promise<IDevbox> {
  return request<IDevbox>(`devboxes/${encodeURIComponent(name)}/stop`, { method: 'POST' });
}

export function deleteDevbox(
  name: string,
  purge: boolean
): Promise<{ name: string; purged: boolean; message: string }> {
  return request(
    `devboxes/${encodeURIComponent(name)}`,
    { method: 'DELETE' },
    { purge: purge ? 'true' : 'false' }
  );
}

/** Asks the controller to hold the answer until the box is ready, degraded or `timeout` passes. */
export function waitDevbox(name: string, timeoutSeconds: number): Promise<IDevbox> {
  return request<IDevbox>(
    `devboxes/${encodeURIComponent(name)}`,
    {},
    { wait: 'ready', timeout: String(timeoutSeconds) }
  );
}
