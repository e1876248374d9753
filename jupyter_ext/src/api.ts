import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { components, devboxCreatePresetValues } from './openapi';
import { components as watchComponents } from './watch-openapi';

type Schemas = components['schemas'];
type WatchSchemas = watchComponents['schemas'];

// The controller's bodies, generated from its OpenAPI document (see openapi.ts).
export type Capabilities = Schemas['Capabilities'];
export type GpuProfile = Schemas['GpuProfile'];
export type ImageProfile = Schemas['ImageProfile'];
export type GpuAllocation = Schemas['GpuAllocation'];
export type GpuAvailability = Schemas['GpuAvailability'];
export type GpuWhen = Schemas['GpuWhen'];
export type ProfileAvailability = Schemas['ProfileAvailability'];
export type Devbox = Schemas['Devbox'];
export type DevboxCreate = Schemas['DevboxCreate'];
export type DeleteResult = Schemas['DeleteResult'];
export type WhoAmI = Schemas['WhoAmI'];
type FieldError = Schemas['FieldError'];

/** The presets a create may name, in the order the API lists them. */
export const PRESETS = devboxCreatePresetValues;

/**
 * The server extension's view, answered by the watch route once it changes, and what a
 * devbox kernel start is doing; generated from its own OpenAPI document (see
 * watch-openapi.ts and devboxes_jupyter/models.py).
 */
export type IView = WatchSchemas['WatchView'];
export type IKernelProgress = WatchSchemas['KernelProgress'];
/** One cluster of a server that serves the several clusters of its SDK configuration. */
export type IClusterView = WatchSchemas['ClusterView'];
/** A box created on a cluster named, or where `auto` placed it, and why there. */
export type ICreated = WatchSchemas['CreatedBox'];

/** `?cluster=*`: every cluster's answer at once (no cluster's name: names are DNS labels). */
export const ALL_CLUSTERS = '*';
/** `?cluster=auto` on a create: the cluster whose GPU profile has a device free. */
export const AUTO_CLUSTER = 'auto';

/** Every cluster's answer to a `?cluster=*` read, and why a cluster gave none. */
export interface IAnswers<T> {
  answers: { cluster: string; value: T }[];
  errors: { cluster: string; message: string }[];
  notes: string[];
}

/** The query that sends a request to `cluster`; none for a server of one controller. */
function on(cluster?: string | null): Record<string, string> {
  return cluster ? { cluster } : {};
}

/**
 * An error answered by the server extension, with the controller's own words; `fields`
 * holds each rejected body field's message by its name ("image"), so a form can show it
 * beside that field.
 */
export class DevboxesApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly fields: Record<string, string> = {}
  ) {
    super(message);
  }
}

function fieldMessages(detail: unknown): Record<string, string> {
  const fields: Record<string, string> = {};
  if (Array.isArray(detail)) {
    for (const item of detail as FieldError[]) {
      const field = (item.loc ?? []).filter(part => part !== 'body').join('.');
      if (field) {
        fields[field] = item.msg;
      }
    }
  }
  return fields;
}

/** Turns an error body's `detail` (a message or a list of field errors) into one sentence. */
export function describeDetail(detail: unknown): string {
  if (typeof detail === 'string') {
    return detail;
  }
  if (Array.isArray(detail)) {
    return detail
      .map((item: FieldError) => {
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
    if (body && typeof body === 'object' && 'detail' in body) {
      const detail = (body as { detail: unknown }).detail;
      throw new DevboxesApiError(response.status, describeDetail(detail), fieldMessages(detail));
    }
    throw new DevboxesApiError(response.status, `${response.status} ${response.statusText}`);
  }
  return body as T;
}

export function getCapabilities(): Promise<Capabilities> {
  return request<Capabilities>('capabilities');
}

/** Whom the controller takes this Jupyter server's requests for. */
export function getWhoAmI(): Promise<WhoAmI> {
  return request<WhoAmI>('whoami');
}

/** Whom each cluster's controller takes this Jupyter server's requests for. */
export function getWhoAmIEverywhere(): Promise<IAnswers<WhoAmI>> {
  return request<IAnswers<WhoAmI>>('whoami', {}, on(ALL_CLUSTERS));
}

/**
 * Whether this Jupyter server runs the Devboxes server extension: JupyterLab loads the
 * labextension from every install, but the server extension needs the [jupyter] extra.
 */
export async function serverExtensionLoaded(): Promise<boolean> {
  try {
    await watch(-1, 0);
    return true;
  } catch (error) {
    // Any other failure is the sidebar's to show.
    return !(error instanceof DevboxesApiError && error.status === 404);
  }
}

export function createDevbox(body: DevboxCreate): Promise<Devbox> {
  return request<Devbox>('devboxes', {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/** Create on `cluster`, or where `auto` finds a free device; says where and why. */
export function createDevboxOn(body: DevboxCreate, cluster: string): Promise<ICreated> {
  return request<ICreated>('devboxes', { method: 'POST', body: JSON.stringify(body) }, on(cluster));
}

/** The view once it is newer than `after`, or as it is after `timeoutSeconds`. */
export function watch(after: number, timeoutSeconds: number): Promise<IView> {
  return request<IView>('watch', {}, { after: String(after), timeout: String(timeoutSeconds) });
}

/**
 * `start` or `stop` a box (of `cluster`, on a server of several); the answer is the box
 * as the controller then reports it.
 */
export function changeDevbox(
  name: string,
  action: 'start' | 'stop',
  cluster?: string | null
): Promise<Devbox> {
  return request<Devbox>(
    `devboxes/${encodeURIComponent(name)}/${action}`,
    { method: 'POST' },
    on(cluster)
  );
}

/** Push a running box's auto-stop time back by `hours`; the box as it then is. */
export function extendDevbox(name: string, hours: number, cluster?: string | null): Promise<Devbox> {
  return request<Devbox>(
    `devboxes/${encodeURIComponent(name)}/extend`,
    { method: 'POST', body: JSON.stringify({ hours }) },
    on(cluster)
  );
}

export function deleteDevbox(
  name: string,
  purge: boolean,
  cluster?: string | null
): Promise<DeleteResult> {
  return request<DeleteResult>(
    `devboxes/${encodeURIComponent(name)}`,
    { method: 'DELETE' },
    { purge: purge ? 'true' : 'false', ...on(cluster) }
  );
}

/** Forgets a failed devbox kernel start, for every page of this Jupyter server. */
export function dismissKernel(kernelId: string): Promise<void> {
  return request<void>(`kernels/${encodeURIComponent(kernelId)}`, { method: 'DELETE' });
}

/** Forgets every failed devbox kernel start, for every page of this Jupyter server. */
export function dismissFailedKernels(): Promise<void> {
  return request<void>('kernels', { method: 'DELETE' });
}
