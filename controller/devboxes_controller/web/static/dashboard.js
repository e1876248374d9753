// The dashboard calls /api/v1 with the session cookie; every mutation carries the
// session's CSRF value, which the server renders into a meta tag of this page.
// An ES module: the display words come from labels.js, generated from the Lab's words.ts.
import * as labels from "./labels.js";

(function () {
  const csrf = document.querySelector('meta[name="devboxes-csrf"]').content;
  const ttlMax = Number(document.querySelector('meta[name="devboxes-ttl-max"]').content);
  const rows = new Map();
  const $ = (id) => document.getElementById(id);

  // This cluster's name and the other clusters' dashboards the operator lists; each
  // dashboard shows its own cluster's boxes only.
  function showClusters() {
    const own = document.querySelector('meta[name="devboxes-cluster"]').content;
    const peers = JSON.parse(document.querySelector('meta[name="devboxes-peers"]').content);
    const nav = $("clusters");
    if (!own && peers.length === 0) return;
    if (own) {
      const here = document.createElement("strong");
      here.textContent = own;
      here.dataset.testid = "cluster-here";
      nav.append("Cluster ", here);
    }
    if (peers.length > 0) {
      nav.append(own ? " · other clusters: " : "Other clusters: ");
      peers.forEach((peer, index) => {
        const link = document.createElement("a");
        link.href = `${peer.url}/dashboard`;
        link.rel = "noopener noreferrer";
        link.textContent = peer.name;
        link.dataset.testid = `cluster-peer-${peer.name}`;
        nav.append(index > 0 ? ", " : "", link);
      });
    }
    nav.hidden = false;
  }

  function toLogin() {
    window.location.assign("/dashboard/login?next=/dashboard");
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") headers["X-Devboxes-CSRF"] = csrf;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch("/api/v1" + path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {
      toLogin();
      throw new Error("session ended");
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = { detail: `unexpected response (HTTP ${response.status})` };
    }
    return { ok: response.ok, status: response.status, data };
  }

  // -- a list the controller no longer refreshes -------------------------------------
  // When the page last heard from the controller, and whether it has lost it since.
  let heardAt = null;
  let stale = false;

  // Every button that asks the controller for something; Cancel and Sign out stay.
  const ACTIONS = "#box-rows button, #volume-rows button, #booking-rows button, " +
    "#create-button, #book-button, #delete-submit, #extend-submit, #volume-submit";

  function applyStale() {
    document.body.dataset.stale = String(stale);
    $("stale").hidden = !stale;
    if (stale) $("stale-text").textContent = labels.staleNotice(heardAt);
    for (const button of document.querySelectorAll(ACTIONS)) {
      if (stale) {
        // Run again for rows added meanwhile: a button keeps what it was before it all.
        if (button.dataset.enabledBeforeStale === undefined) {
          button.dataset.enabledBeforeStale = String(!button.disabled);
        }
        button.disabled = true;
      } else if (button.dataset.enabledBeforeStale !== undefined) {
        button.disabled = button.dataset.enabledBeforeStale === "false";
        delete button.dataset.enabledBeforeStale;
      }
    }
    if (!stale && $("delete-dialog").open) refreshDelete();
    if (!stale && $("volume-dialog").open) refreshPurgeVolume();
  }

  function setStale(value) {
    if (!value) heardAt = new Date().toISOString();
    if (value === stale) return;
    stale = value;
    applyStale();
  }

  function announce(text) {
    $("action-status").textContent = text;
  }

  // -- the accelerator selector --------------------------------------------------------
  function acceleratorOption(value, label, description, checked, isDefault) {
    const id = "accelerator-" + (value || "cpu");
    const wrap = document.createElement("div");
    wrap.className = "option";
    const input = document.createElement("input");
    input.type = "radio";
    input.name = "accelerator";
    input.id = id;
    input.value = value;
    input.checked = checked;
    const text = document.createElement("label");
    text.htmlFor = id;
    const title = document.createElement("span");
    title.className = "option-title";
    title.textContent = label;
    if (value) {
      // Filled in, and kept current, from the event stream's availability.
      const free = document.createElement("span");
      free.className = "option-free";
      free.id = id + "-free";
      // And when a new box of it would get a device, with the reason as its title.
      const next = document.createElement("span");
      next.className = "option-next";
      next.id = id + "-next";
      title.append(free, next);
    }
    if (isDefault) {
      // The profile a bare "gpu" request gets, marked as the CLI and Jupyter mark it.
      const mark = document.createElement("span");
      mark.className = "option-default";
      mark.textContent = " (default)";
      title.append(mark);
    }
    text.append(title);
    if (description) {
      const help = document.createElement("span");
      help.className = "option-description";
      help.id = id + "-description";
      help.textContent = description;
      text.append(help);
      input.setAttribute("aria-describedby", help.id);
    }
    wrap.append(input, text);
    return wrap;
  }

  async function loadCapabilities() {
    const { ok, data } = await api("GET", "/capabilities");
    if (!ok) {
      $("create-error").textContent = "Could not load the accelerator catalog: " + detailText(data);
      return;
    }
    showEnvironments(data.images || { enabled: false, profiles: [] });
    const gpu = data.gpu || { enabled: false, profiles: [] };
    if (!gpu.enabled) {
      $("gpu-disabled").hidden = false;
      return;
    }
    const options = $("accelerator-options");
    options.replaceChildren(
      acceleratorOption("", labels.CPU_ONLY, "No accelerator", true, false),
      ...gpu.profiles.map((p) =>
        acceleratorOption(p.name, labels.unitsLabel(p), p.description || "", false, p.default)),
    );
    $("accelerator").hidden = false;
    showAvailability(availability);
  }

  // Shown only when the operator publishes image profiles. Which accelerators an image
  // supports is not published, so a mismatch shows as the controller's refusal under it.
  let environments = [];

  function showEnvironments(images) {
    environments = images.enabled ? images.profiles : [];
    if (!environments.length) return;
    $("box-environment").replaceChildren(
      new Option(labels.DEFAULT_ENVIRONMENT, "", true, true),
      ...environments.map((p) => new Option(labels.environmentChoiceLabel(p), p.name)),
    );
    describeEnvironment();
    $("environment").hidden = false;
  }

  function describeEnvironment() {
    const chosen = environments.find((p) => p.name === $("box-environment").value);
    $("box-environment-help").textContent = chosen
      ? chosen.description || labels.environmentChoiceLabel(chosen)
      : "The operator's workspace image.";
  }

  // -- free devices per profile, pushed over the event stream --------------------------
  let availability = null;

  function showAvailability(data) {
    availability = data;
    if (!data) return;
    for (const entry of data.profiles) {
      const free = $("accelerator-" + entry.name + "-free");
      if (!free) continue;
      // A full profile stays selectable: the new box waits in line for a device.
      const full = entry.available === 0;
      free.textContent = labels.freeText(entry) + (full ? " (full: a new box waits)" : "");
      free.closest(".option").classList.toggle("option-full", full);
      if (entry.reason) free.title = entry.reason;
      else free.removeAttribute("title");
    }
  }

  // -- the create form -----------------------------------------------------------------
  // The presets are those the API's own description of a create lists.
  async function loadPresets() {
    const response = await fetch("/openapi.json", {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    if (!response.ok) {
      $("box-preset-error").textContent = "Could not load the presets: the server's default applies.";
      return;
    }
    const preset = (await response.json()).components.schemas.DevboxCreate.properties.preset;
    $("box-preset").replaceChildren(
      ...preset.enum.map((name) => new Option(name, name, name === preset.default, name === preset.default)),
    );
  }

  const fieldErrors = {
    name: "box-name-error",
    preset: "box-preset-error",
    ttl_hours: "box-ttl-error",
    gpu: "accelerator-error",
    image: "box-environment-error",
  };

  function detailText(data) {
    if (!data || data.detail === undefined) return "unknown error";
    if (typeof data.detail === "string") return data.detail;
    return data.detail.map((e) => e.msg).join("; ");
  }

  function clearErrors() {
    for (const id of [...Object.values(fieldErrors), "create-error"]) $(id).textContent = "";
    for (const id of ["box-name", "box-preset", "box-ttl", "box-environment"]) {
      $(id).removeAttribute("aria-invalid");
    }
  }

  function showError(field, message) {
    const id = field ? fieldErrors[field] : "create-error";
    const target = $(id);
    target.textContent = target.textContent ? target.textContent + " " + message : message;
    const input = {
      name: "box-name", preset: "box-preset", ttl_hours: "box-ttl", image: "box-environment",
    }[field];
    if (input) $(input).setAttribute("aria-invalid", "true");
  }

  function showServerErrors(status, data) {
    if (data && Array.isArray(data.detail)) {
      for (const error of data.detail) {
        const loc = (error.loc || []).filter((p) => p !== "body");
        const field = loc.length && fieldErrors[loc[0]] ? String(loc[0]) : null;
        showError(field, error.msg);
      }
    } else {
      // A create conflicts only over its name: a box of that name, or its purged volume.
      showError(status === 409 ? "name" : null, detailText(data));
    }
    // Focus moves to the first field in error, whose description now carries the message.
    const invalid = document.querySelector('#create-form [aria-invalid="true"]');
    if (invalid) invalid.focus();
  }

  async function create(event) {
    event.preventDefault();
    clearErrors();
    const form = event.target;
    const ttl = Number(form.ttl_hours.value);
    const chosen = form.querySelector('input[name="accelerator"]:checked');
    const body = {
      name: $("box-name").value.trim(),
      ttl_hours: Number.isInteger(ttl) ? ttl : form.ttl_hours.value,
    };
    if (form.preset.value) body.preset = form.preset.value;
    if (chosen && chosen.value) body.gpu = { profile: chosen.value };
    if (form.image.value) body.image = form.image.value;
    const button = $("create-button");
    button.disabled = true;
    try {
      const { ok, status, data } = await api("POST", "/devboxes", body);
      if (ok) {
        showAnswer(data);
        announce(`Box ${data.name} created.`);
        $("box-name").value = "";
        // Back to CPU only, so the next box gets a GPU only if one is chosen again.
        const cpu = $("accelerator-cpu");
        if (cpu) cpu.checked = true;
      } else {
        showServerErrors(status, data);
      }
    } finally {
      button.disabled = stale;
    }
  }

  // -- the box table -------------------------------------------------------------------
  // Relative, so it is written again every minute (below); the moment is its tooltip.
  function fillAutoStop(row) {
    const box = row.box;
    const time = document.createElement("time");
    // A warned stop may come before expires_at: an idle one does.
    const warning = box.state !== "stopped" ? box.stop_warning : null;
    const stopsAt = warning ? warning.stops_at : box.expires_at;
    if (stopsAt && box.state !== "stopped") {
      time.dateTime = stopsAt;
      time.title = new Date(stopsAt).toLocaleString();
    }
    time.textContent = labels.autoStopLabel(box);
    if (warning) {
      time.className = "stop-warned";
      time.title = warning.message;
      time.dataset.testid = `stop-warning-${box.name}`;
    }
    row.cells.autostop.replaceChildren(time);
  }

  // The first line is shown whole; the lines after it (the scheduler's reasons run to
  // several sentences) are folded under it, one click away.
  function fillMessage(row, message) {
    // Unchanged text is left alone, so a message the user expanded stays open.
    if (row.message === message) return;
    row.message = message;
    const cell = row.cells.message;
    const [first, ...rest] = message.split("\n");
    if (rest.length === 0) {
      cell.textContent = message;
      return;
    }
    const previous = cell.querySelector("details");
    const details = document.createElement("details");
    details.className = "message";
    details.open = previous !== null && previous.open;
    const summary = document.createElement("summary");
    summary.textContent = first;
    const more = document.createElement("p");
    more.className = "message-more";
    more.textContent = rest.join("\n");
    details.append(summary, more);
    cell.replaceChildren(details);
  }

  function minutesFromNow(iso) {
    return Math.round((Date.parse(iso) - Date.now()) / 60000);
  }

  // Computed when the box last changed: the server pushes no update while nothing does.
  function activityText(box) {
    const activity = box.activity;
    if (!activity || activity.state !== "idle" || !activity.idle_since) return "";
    const idle = `Idle for ${Math.max(0, -minutesFromNow(activity.idle_since))} min`;
    if (!activity.stops_at) return idle;
    return `${idle}; stops in ${Math.max(0, minutesFromNow(activity.stops_at))} min`;
  }

  function actionButton(label, box, handler, className) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = label;
    button.className = className || "secondary";
    button.setAttribute("aria-label", `${label} ${box.name}`);
    button.addEventListener("click", () => handler(button.dataset.box));
    button.dataset.box = box.name;
    return button;
  }

  function newRow(box) {
    const tr = document.createElement("tr");
    tr.dataset.box = box.name;
    const cells = {};
    for (const key of [
      "name", "owner", "state", "accelerator", "environment", "preset", "autostop", "ssh",
      "message",
    ]) {
      const cell = document.createElement(key === "name" ? "th" : "td");
      if (key === "name") cell.scope = "row";
      cell.className = "col-" + key;
      cells[key] = cell;
      tr.append(cell);
    }
    const actions = document.createElement("td");
    actions.className = "col-actions";
    const start = actionButton("Start", box, (name) => lifecycle(name, "start"));
    const stop = actionButton("Stop", box, (name) => lifecycle(name, "stop"));
    const extend = actionButton("Extend", box, openExtend);
    const remove = actionButton("Delete", box, openDelete, "danger");
    actions.append(start, stop, extend, remove);
    tr.append(actions);
    return { tr, cells, start, stop, extend, box, message: null };
  }

  function fill(row, box) {
    row.box = box;
    row.tr.dataset.state = box.state;
    row.cells.name.textContent = box.name;
    row.cells.owner.textContent = box.owner;
    knowOwner(box.owner);
    const badge = document.createElement("span");
    badge.className = "state state-" + box.state;
    badge.textContent = box.state;
    row.cells.state.replaceChildren(badge);
    row.cells.accelerator.textContent = labels.allocationLabel(box.gpu);
    // What a DRA box actually got, which its profile may leave open (one of alternatives).
    const allocated = labels.allocatedLabel(box.gpu && box.gpu.allocated);
    if (allocated) {
      const got = document.createElement("div");
      got.className = "allocated";
      got.textContent = "allocated " + allocated;
      row.cells.accelerator.append(got);
    }
    row.cells.environment.textContent = labels.environmentLabel(box.image);
    // Each port the box's image declares opens in a tab of its own, on the preview's own
    // origin (the controller hands the browser over); never with this page as its opener.
    const ports = box.state === "ready" && box.image ? box.image.ports : [];
    for (const port of ports.filter((p) => (p.protocol || "TCP") === "TCP")) {
      const link = document.createElement("a");
      link.href = `/dashboard/devboxes/${encodeURIComponent(box.name)}/ports/${port.container_port}/`;
      link.target = "_blank";
      link.rel = "noopener noreferrer";
      link.className = "preview-link";
      link.textContent = `Open ${port.name} (${port.container_port})`;
      const line = document.createElement("div");
      line.append(link);
      row.cells.environment.append(line);
    }
    row.cells.preset.textContent = box.preset;
    fillAutoStop(row);
    if (box.ssh_command) {
      const code = document.createElement("code");
      code.textContent = box.ssh_command;
      row.cells.ssh.replaceChildren(code);
    } else {
      row.cells.ssh.textContent = "—";
    }
    // The first line is the reason in the words of the CLI and the Lab (the place in line
    // and the free count while the box waits); the controller's full message follows.
    const why = labels.reason(box);
    fillMessage(row, [
      why,
      box.message !== why ? box.message || "" : "",
      activityText(box),
      box.restart_required ? `Restart required: ${box.restart_reason || "the release changed"}` : "",
    ].filter(Boolean).join("\n"));
    row.start.hidden = box.state !== "stopped";
    row.stop.hidden = box.state === "stopped";
    row.extend.hidden = box.state === "stopped";
  }

  // Whether box a is listed above box b: newest first, then by name, as the API's list.
  function above(a, b) {
    return Date.parse(a.created_at) > Date.parse(b.created_at) ||
      (a.created_at === b.created_at && a.name > b.name);
  }

  function upsert(box) {
    let row = rows.get(box.name);
    if (!row) {
      row = newRow(box);
      rows.set(box.name, row);
      const body = $("box-rows");
      const older = [...body.children].find((tr) => above(box, rows.get(tr.dataset.box).box));
      body.insertBefore(row.tr, older || null);
    }
    fill(row, box);
    if (stale) applyStale();
    $("no-boxes").hidden = rows.size > 0;
  }

  // A write's answer may reach the page after the stream has shown a newer state of the
  // box (the pod the scheduler could not place, say). While the stream is live it alone
  // updates the rows it shows; the answer only adds a box the page has not shown yet, and
  // none of another owner than the one the list is narrowed to.
  function showAnswer(box) {
    const owner = $("owner-filter").value;
    if (owner && box.owner !== owner) return;
    if (!rows.has(box.name) || $("connection").dataset.live !== "true") upsert(box);
  }

  function remove(name) {
    const row = rows.get(name);
    if (row) {
      row.tr.remove();
      rows.delete(name);
    }
    $("no-boxes").hidden = rows.size > 0;
  }

  function replaceAll(items) {
    const seen = new Set(items.map((b) => b.name));
    for (const name of [...rows.keys()]) if (!seen.has(name)) remove(name);
    // The snapshot comes in name order. Oldest first, so each insert lands at the top.
    for (const box of [...items].sort((a, b) => (above(a, b) ? 1 : -1))) upsert(box);
    $("no-boxes").hidden = rows.size > 0;
  }

  async function lifecycle(name, verb) {
    announce(`${verb === "start" ? "Starting" : "Stopping"} ${name}…`);
    const { ok, data } = await api("POST", `/devboxes/${encodeURIComponent(name)}/${verb}`);
    if (ok) {
      showAnswer(data);
      announce(`Box ${name} ${verb === "start" ? "started" : "stopped"}.`);
    } else {
      announce(`Could not ${verb} ${name}: ${detailText(data)}`);
    }
  }

  // -- delete and purge ----------------------------------------------------------------
  const dialog = $("delete-dialog");
  let deleting = null;

  function purgeReady() {
    return !$("delete-purge").checked || $("delete-confirm").value === deleting;
  }

  function refreshDelete() {
    $("purge-confirm").hidden = !$("delete-purge").checked;
    $("delete-submit").disabled = !purgeReady();
    $("delete-submit").textContent = $("delete-purge").checked ? "Delete and purge" : "Delete";
  }

  function openDelete(name) {
    deleting = name;
    $("delete-name").textContent = name;
    $("delete-purge").checked = false;
    $("delete-confirm").value = "";
    $("delete-error").textContent = "";
    refreshDelete();
    dialog.showModal();
  }

  async function confirmDelete(event) {
    event.preventDefault();
    if (!deleting || !purgeReady()) return;
    const name = deleting;
    const purge = $("delete-purge").checked;
    $("delete-submit").disabled = true;
    const { ok, data } = await api(
      "DELETE", `/devboxes/${encodeURIComponent(name)}${purge ? "?purge=true" : ""}`);
    if (ok) {
      dialog.close();
      remove(name);
      announce(data.message);
    } else {
      $("delete-error").textContent = detailText(data);
      refreshDelete();
    }
  }

  // -- extend --------------------------------------------------------------------------
  const extendDialog = $("extend-dialog");
  let extending = null;

  function openExtend(name) {
    extending = name;
    $("extend-name").textContent = name;
    $("extend-error").textContent = "";
    $("extend-hours").max = String(ttlMax);
    extendDialog.showModal();
  }

  async function confirmExtend(event) {
    event.preventDefault();
    const hours = Number($("extend-hours").value);
    if (!extending || !Number.isInteger(hours) || hours < 1) {
      $("extend-error").textContent = "Enter a whole number of hours, at least 1.";
      return;
    }
    const name = extending;
    $("extend-submit").disabled = true;
    try {
      const { ok, data } = await api(
        "POST", `/devboxes/${encodeURIComponent(name)}/extend`, { hours });
      if (ok) {
        extendDialog.close();
        showAnswer(data);
        const at = new Date(data.expires_at).toLocaleString();
        announce(`Box ${name} now stops at ${at} (${labels.autoStopLabel(data)}).`);
      } else {
        $("extend-error").textContent = detailText(data);
      }
    } finally {
      $("extend-submit").disabled = stale;
    }
  }

  // -- retained volumes ----------------------------------------------------------------
  const volumeDialog = $("volume-dialog");
  let purging = null;

  function volumeRow(volume) {
    const tr = document.createElement("tr");
    tr.dataset.volume = volume.name;
    const name = document.createElement("th");
    name.scope = "row";
    name.textContent = volume.name;
    tr.append(name);
    for (const text of [volume.owner, volume.size || "—",
      new Date(volume.created_at).toLocaleString(), volume.last_profile || "CPU"]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      tr.append(cell);
    }
    const actions = document.createElement("td");
    actions.className = "col-actions";
    actions.append(actionButton("Purge", volume, openPurgeVolume, "danger"));
    tr.append(actions);
    return tr;
  }

  let volumesAsked = 0;
  async function loadVolumes() {
    const asked = ++volumesAsked;
    const { ok, data } = await api("GET", "/volumes");
    // An older answer that arrives after a newer one would bring a purged volume back.
    if (!ok || asked !== volumesAsked) return;
    $("volume-rows").replaceChildren(...data.items.map(volumeRow));
    $("no-volumes").hidden = data.items.length > 0;
  }

  function refreshPurgeVolume() {
    $("volume-submit").disabled = $("volume-confirm").value !== purging;
  }

  function openPurgeVolume(name) {
    purging = name;
    $("volume-name").textContent = name;
    $("volume-confirm").value = "";
    $("volume-error").textContent = "";
    refreshPurgeVolume();
    volumeDialog.showModal();
  }

  async function confirmPurgeVolume(event) {
    event.preventDefault();
    if (!purging || $("volume-confirm").value !== purging) return;
    const name = purging;
    $("volume-submit").disabled = true;
    const { ok, data } = await api("DELETE", `/volumes/${encodeURIComponent(name)}`);
    if (ok) {
      volumeDialog.close();
      announce(data.message);
      await loadVolumes();
    } else {
      $("volume-error").textContent = detailText(data);
      refreshPurgeVolume();
    }
  }

  // -- GPU time: the next 24 hours of each profile, and bookings -----------------------
  const HOUR_MS = 3600000;

  function clock(ms) {
    return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  function when(iso) {
    return new Date(iso).toLocaleString([], {
      month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    });
  }

  function drawProfile(profile, start, span) {
    const figure = document.createElement("figure");
    figure.className = "timeline";
    figure.dataset.profile = profile.name;
    const caption = document.createElement("figcaption");
    caption.textContent = profile.name + (profile.waiting ? ` · ${profile.waiting} waiting` : "");
    if (profile.note) {
      const note = document.createElement("span");
      note.className = "note";
      note.textContent = " — " + profile.note;
      caption.append(note);
    }
    figure.append(caption);
    if (!profile.lanes.length) return figure;
    const ticks = document.createElement("div");
    ticks.className = "ticks";
    ticks.setAttribute("aria-hidden", "true");
    for (let hour = 0; hour < 24; hour += 3) {
      const tick = document.createElement("span");
      tick.style.left = `${(hour * HOUR_MS / span) * 100}%`;
      tick.textContent = hour ? clock(start + hour * HOUR_MS) : "now";
      ticks.append(tick);
    }
    figure.append(ticks);
    profile.lanes.forEach((lane, index) => {
      const row = document.createElement("div");
      row.className = "lane";
      row.setAttribute("role", "list");
      row.setAttribute("aria-label", `${profile.name}, device ${index + 1}`);
      for (const segment of lane) {
        const from = Date.parse(segment.starts_at);
        const to = Date.parse(segment.ends_at);
        const block = document.createElement("div");
        block.className = `segment ${segment.kind}` + (segment.mine ? " mine" : "");
        block.setAttribute("role", "listitem");
        block.style.left = `${((from - start) / span) * 100}%`;
        block.style.width = `${((to - from) / span) * 100}%`;
        block.textContent = segment.label;
        block.title = `${segment.label}: ${when(segment.starts_at)} – ${when(segment.ends_at)}`;
        row.append(block);
      }
      figure.append(row);
    });
    return figure;
  }

  function bookingRow(booking) {
    const tr = document.createElement("tr");
    tr.dataset.booking = booking.name;
    const name = document.createElement("th");
    name.scope = "row";
    name.textContent = booking.name;
    tr.append(name);
    for (const text of [booking.owner, booking.profile, when(booking.starts_at),
      when(booking.ends_at), booking.state, booking.message]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      tr.append(cell);
    }
    const actions = document.createElement("td");
    actions.className = "col-actions";
    if (booking.state === "booked" || booking.state === "open" || booking.state === "used") {
      actions.append(actionButton("Cancel", booking, cancelBooking, "secondary"));
    }
    tr.append(actions);
    return tr;
  }

  function showNextFree(data) {
    for (const entry of data.profiles) {
      const next = $("accelerator-" + entry.name + "-next");
      if (!next) continue;
      next.textContent = ` · next free: ${labels.nextFreeLabel(entry, data.observed_at)}`;
      next.title = entry.basis;
    }
  }

  let timeAsked = 0;
  async function loadTime() {
    const asked = ++timeAsked;
    const [timeline, bookings, found] = await Promise.all([
      api("GET", "/gpu/timeline"), api("GET", "/bookings"), api("GET", "/gpu/when"),
    ]);
    if (asked !== timeAsked) return;
    if (found.ok) showNextFree(found.data);
    if (!timeline.ok) return;
    const start = Date.parse(timeline.data.starts_at);
    const span = Date.parse(timeline.data.ends_at) - start;
    const profiles = timeline.data.profiles;
    $("timelines").replaceChildren(...profiles.map((p) => drawProfile(p, start, span)));
    const select = $("book-profile");
    const chosen = select.value;
    select.replaceChildren(...profiles.filter((p) => !p.note).map((p) => new Option(p.name, p.name)));
    if ([...select.options].some((o) => o.value === chosen)) select.value = chosen;
    $("book-form").hidden = select.options.length === 0;
    $("gpu-time").hidden = profiles.length === 0;
    if (bookings.ok) {
      $("booking-rows").replaceChildren(...bookings.data.items.map(bookingRow));
      $("no-bookings").hidden = bookings.data.items.length > 0;
    }
  }

  // The next whole hour, as a datetime-local field takes it (local time, no zone).
  function nextHour() {
    const next = new Date(Math.ceil(Date.now() / HOUR_MS) * HOUR_MS);
    const pad = (n) => String(n).padStart(2, "0");
    return `${next.getFullYear()}-${pad(next.getMonth() + 1)}-${pad(next.getDate())}` +
      `T${pad(next.getHours())}:${pad(next.getMinutes())}`;
  }

  async function book(event) {
    event.preventDefault();
    $("book-error").textContent = "";
    const start = new Date($("book-start").value);
    if (Number.isNaN(start.getTime())) {
      $("book-error").textContent = "From: give a date and time.";
      return;
    }
    const body = {
      profile: $("book-profile").value,
      starts_at: start.toISOString(),
      hours: Number($("book-hours").value),
    };
    if ($("book-box").value.trim()) body.box = $("book-box").value.trim();
    $("book-button").disabled = true;
    try {
      const { ok, data } = await api("POST", "/bookings", body);
      if (ok) {
        announce(`${data.name}: ${data.message}`);
        await loadTime();
      } else {
        $("book-error").textContent = detailText(data);
      }
    } finally {
      $("book-button").disabled = stale;
    }
  }

  async function cancelBooking(name) {
    const { ok, data } = await api("DELETE", `/bookings/${encodeURIComponent(name)}`);
    announce(ok ? `${data.name} cancelled.` : detailText(data));
    await loadTime();
  }

  // Availability changes come in bursts; the timeline is read again at most this often.
  const TIME_PAUSE_MS = 5000;
  let timeDue = null;

  function timeChanged() {
    if (timeDue !== null) return;
    timeDue = setTimeout(() => {
      timeDue = null;
      loadTime().catch(() => undefined);
    }, TIME_PAUSE_MS);
  }

  // -- the owner filter ----------------------------------------------------------------
  // Offered to admins, who see everyone's boxes. The stream itself is narrowed to the
  // chosen owner (its ?owner=), so the rows are the server's answer, not a hidden subset;
  // the owners offered are those seen since the page opened, so choosing one keeps the rest.
  const owners = new Set();

  function knowOwner(owner) {
    if (owners.has(owner)) return;
    owners.add(owner);
    const select = $("owner-filter");
    const option = new Option(owner, owner);
    const after = [...select.options].slice(1).find((o) => o.value > owner);
    select.add(option, after || null);
  }

  async function offerOwnerFilter() {
    const { ok, data } = await api("GET", "/whoami");
    $("owner-field").hidden = !(ok && data.admin);
  }

  function chooseOwner() {
    if (source) source.close();
    announce("");
    connect();
  }

  // -- live updates --------------------------------------------------------------------
  // Seconds before the page opens a new stream after the browser gave one up for good.
  const RECONNECT_MS = 3000;
  // The open stream, closed when the owner filter asks for another.
  let source = null;

  function connect() {
    const owner = $("owner-filter").value;
    const stream = new EventSource(
      "/dashboard/events" + (owner ? `?owner=${encodeURIComponent(owner)}` : ""));
    source = stream;
    const status = $("connection");
    stream.addEventListener("open", () => { status.textContent = "Live"; status.dataset.live = "true"; });
    // A deleted box may leave its volume behind, and a new box may take one back.
    stream.addEventListener("snapshot", (e) => {
      replaceAll(JSON.parse(e.data).items);
      // The whole list again: from here on it is current.
      setStale(false);
      loadVolumes().catch(() => undefined);
    });
    stream.addEventListener("box", (e) => {
      setStale(false);
      const box = JSON.parse(e.data);
      const known = rows.has(box.name);
      upsert(box);
      timeChanged();
      if (!known) loadVolumes().catch(() => undefined);
    });
    stream.addEventListener("removed", (e) => {
      remove(JSON.parse(e.data).name);
      loadVolumes().catch(() => undefined);
    });
    stream.addEventListener("availability", (e) => {
      showAvailability(JSON.parse(e.data));
      timeChanged();
    });
    stream.addEventListener("expired", () => { stream.close(); toLogin(); });
    stream.addEventListener("error", async () => {
      status.textContent = "Reconnecting…";
      status.dataset.live = "false";
      setStale(true);
      // EventSource hides the status code: ask the API whether the session is still valid.
      try {
        await api("GET", "/whoami");
      } catch (err) {
        if (err.message === "session ended") {
          stream.close();
          return;
        }
        // No answer at all: the controller is down; the stream keeps trying.
      }
      // An answer other than a stream (a proxy's 502, a replica not ready yet) makes the
      // browser give up on the stream; a new one is opened until the controller is back.
      // A stream the owner filter replaced meanwhile stays closed.
      if (stream.readyState === EventSource.CLOSED && source === stream) {
        setTimeout(connect, RECONNECT_MS);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (ttlMax > 0) $("box-ttl").max = String(ttlMax);
    $("create-form").addEventListener("submit", create);
    $("box-environment").addEventListener("change", () => {
      $("box-environment-error").textContent = "";
      $("box-environment").removeAttribute("aria-invalid");
      describeEnvironment();
    });
    $("delete-form").addEventListener("submit", confirmDelete);
    $("delete-cancel").addEventListener("click", () => dialog.close());
    $("delete-purge").addEventListener("change", refreshDelete);
    $("delete-confirm").addEventListener("input", refreshDelete);
    $("extend-form").addEventListener("submit", confirmExtend);
    $("extend-cancel").addEventListener("click", () => extendDialog.close());
    $("volume-form").addEventListener("submit", confirmPurgeVolume);
    $("volume-cancel").addEventListener("click", () => volumeDialog.close());
    $("volume-confirm").addEventListener("input", refreshPurgeVolume);
    showClusters();
    loadPresets().catch(() => undefined);
    // The timeline after the catalog: it fills in each profile's next free time.
    loadCapabilities().catch(() => undefined).then(() => loadTime()).catch(() => undefined);
    offerOwnerFilter().catch(() => undefined);
    $("owner-filter").addEventListener("change", chooseOwner);
    $("book-form").addEventListener("submit", book);
    $("book-start").value = nextHour();
    connect();
    setInterval(() => rows.forEach(fillAutoStop), 60000);
    setInterval(() => loadTime().catch(() => undefined), 60000);
    // The notice says how old the list is, so it is written again while it shows.
    setInterval(() => { if (stale) $("stale-text").textContent = labels.staleNotice(heardAt); }, 30000);
  });
})();
