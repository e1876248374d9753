// The usage page: GET /api/v1/usage with the session cookie, drawn as per-day charts and
// tables. It only reads, so it sends no CSRF value. What it shows is derived in
// usage_view.js; this file only puts it into the page.
import * as view from "./usage_view.js";

(function () {
  const admin = document.querySelector('meta[name="devboxes-admin"]').content === "true";
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  // The chart's drawing area, in SVG units: room on the left for the hours, below for days.
  const CHART = { width: 640, height: 150, left: 44, right: 8, top: 10, bottom: 24 };

  function toLogin() {
    window.location.assign("/dashboard/login?next=/dashboard/usage");
  }

  async function get(path) {
    const response = await fetch("/api/v1" + path, {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
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

  function svg(name, attributes) {
    const element = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes || {})) {
      element.setAttribute(key, String(value));
    }
    return element;
  }

  function cell(tag, text, className) {
    const element = document.createElement(tag);
    element.textContent = text;
    if (className) element.className = className;
    if (tag === "th") element.scope = "row";
    return element;
  }

  // -- one chart per profile: allocated and busy hours per day -------------------------
  function chart(series) {
    const figure = document.createElement("figure");
    figure.className = "usage-chart card";
    figure.dataset.profile = series.profile;
    const caption = document.createElement("figcaption");
    caption.id = `usage-chart-${series.profile}`;
    const total = series.days.reduce(
      (sum, day) => ({
        allocated_seconds: sum.allocated_seconds + day.allocated_seconds,
        busy_seconds: sum.busy_seconds + day.busy_seconds,
        idle_seconds: sum.idle_seconds + day.idle_seconds,
      }),
      { allocated_seconds: 0, busy_seconds: 0, idle_seconds: 0 },
    );
    const name = cell("strong", series.profile);
    const note = cell(
      "span",
      ` · ${view.hoursText(total.allocated_seconds)} h allocated, ` +
        `${view.hoursText(total.busy_seconds)} h busy (${view.shareText(total)})`,
      "note",
    );
    caption.append(name, note);

    const plotWidth = CHART.width - CHART.left - CHART.right;
    const plotHeight = CHART.height - CHART.top - CHART.bottom;
    const { top, slot, bars } = view.chartBars(series.days, plotWidth, plotHeight);
    const drawing = svg("svg", {
      viewBox: `0 0 ${CHART.width} ${CHART.height}`,
      role: "img",
      "aria-labelledby": caption.id,
      class: "usage-svg",
    });
    const plot = svg("g", { transform: `translate(${CHART.left} ${CHART.top})` });
    // The axis: the bottom line, a middle and a top gridline, labelled in hours.
    for (const fraction of [0, 0.5, 1]) {
      const y = plotHeight - fraction * plotHeight;
      plot.append(svg("line", { x1: 0, x2: plotWidth, y1: y, y2: y, class: "grid" }));
      const label = svg("text", { x: -6, y: y + 4, class: "axis", "text-anchor": "end" });
      label.textContent = `${Number((top * fraction).toFixed(1))} h`;
      plot.append(label);
    }
    const labelled = view.labelledDays(bars.length);
    bars.forEach((bar, index) => {
      const group = svg("g", { class: "day", "data-day": bar.day });
      const title = svg("title");
      title.textContent = bar.title;
      group.append(title);
      group.append(svg("rect", {
        x: bar.x, y: bar.allocated.y, width: bar.width, height: bar.allocated.height,
        class: "bar-allocated",
      }));
      group.append(svg("rect", {
        x: bar.x, y: bar.busy.y, width: bar.width, height: bar.busy.height, class: "bar-busy",
      }));
      if (labelled.has(index)) {
        const label = svg("text", {
          x: index * slot + slot / 2, y: plotHeight + 16, class: "axis", "text-anchor": "middle",
        });
        label.textContent = bar.day.slice(5);
        group.append(label);
      }
      plot.append(group);
    });
    drawing.append(plot);

    // The same numbers as text, folded under the chart.
    const details = document.createElement("details");
    details.append(cell("summary", "Per day"));
    const table = document.createElement("table");
    table.className = "usage-days";
    const head = document.createElement("thead");
    const headRow = document.createElement("tr");
    for (const heading of ["Day (UTC)", "Allocated h", "Busy h", "Idle h", "Unknown h",
      "Busy share", "Waited h"]) {
      const th = cell("th", heading, heading.startsWith("Day") ? "" : "number");
      th.scope = "col";
      headRow.append(th);
    }
    head.append(headRow);
    const body = document.createElement("tbody");
    for (const day of series.days) {
      const tr = document.createElement("tr");
      tr.append(cell("th", day.day));
      for (const text of view.profileCells(day)) tr.append(cell("td", text, "number"));
      body.append(tr);
    }
    table.append(head, body);
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    wrap.append(table);
    details.append(wrap);

    figure.append(caption, drawing, details);
    return figure;
  }

  // -- top holders of idle GPUs --------------------------------------------------------
  function holdersTable(lines, groupBy) {
    const headings = groupBy === "box"
      ? ["Box", "Owner", "Profile", "Idle h", "Busy share"]
      : ["Person", "Boxes", "Idle h", "Busy share"];
    const headRow = document.createElement("tr");
    for (const heading of headings) {
      const th = cell("th", heading, heading.endsWith(" h") || heading === "Busy share" ? "number" : "");
      th.scope = "col";
      headRow.append(th);
    }
    $("usage-idle-head").replaceChildren(headRow);
    const holders = view.idleHolders(lines);
    $("usage-idle-rows").replaceChildren(...holders.map((line) => {
      const tr = document.createElement("tr");
      tr.dataset.key = line.key;
      tr.append(cell("th", line.key));
      if (groupBy === "box") {
        tr.append(cell("td", line.owner || "—"), cell("td", line.profile || "—"));
      } else {
        tr.append(cell("td", String(line.boxes)));
      }
      tr.append(cell("td", view.hoursText(line.idle_seconds), "number"));
      tr.append(cell("td", view.shareText(line), "number"));
      return tr;
    }));
    $("usage-no-idle").hidden = holders.length > 0;
  }

  // -- the per-profile table -----------------------------------------------------------
  function profileRow(line, tag) {
    const tr = document.createElement("tr");
    tr.dataset.profile = line.key;
    tr.append(cell("th", tag === "total" ? "All profiles" : line.key));
    for (const text of view.profileCells(line)) tr.append(cell("td", text, "number"));
    return tr;
  }

  // -- loading -------------------------------------------------------------------------
  function everyone() {
    return admin && $("usage-whose").value === "all";
  }

  function showError(text) {
    $("usage-error").textContent = text;
    $("usage-coverage").textContent = "";
    $("usage-empty").hidden = true;
    $("usage-report").hidden = true;
  }

  let asked = 0;
  async function load() {
    const mine = ++asked;
    const days = view.spanDays($("usage-span").value);
    const all = everyone();
    const groupBy = all ? $("usage-holders").value : "box";
    $("usage-holders-field").hidden = !all;
    $("usage-coverage").textContent = "Loading…";
    const [profiles, holders] = await Promise.all([
      get(`/usage?${view.usageQuery(days, "profile", all)}`),
      get(`/usage?${view.usageQuery(days, groupBy, all)}`),
    ]);
    // An older answer that arrives after a newer one is not shown.
    if (mine !== asked) return;
    const failed = [profiles, holders].find((answer) => !answer.ok);
    if (failed) {
      showError(`Could not load the usage: ${view.detailText(failed.data)}`);
      return;
    }
    const report = profiles.data;
    $("usage-error").textContent = "";
    $("usage-coverage").textContent = view.coverageText(report);
    const empty = view.isEmpty(report);
    $("usage-empty").hidden = !empty;
    $("usage-report").hidden = empty;
    if (empty) return;
    $("usage-charts").replaceChildren(...view.dailySeries(report).map(chart));
    holdersTable(holders.data.lines, groupBy);
    $("usage-profile-rows").replaceChildren(...report.lines.map((line) => profileRow(line)));
    $("usage-profile-total").replaceChildren(profileRow(report.total, "total"));
  }

  function reload() {
    load().catch((err) => {
      if (err.message !== "session ended") showError(`Could not load the usage: ${err.message}`);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    // Only an admin may ask for everyone's usage; for anyone else the API would refuse it.
    $("usage-whose-field").hidden = !admin;
    for (const id of ["usage-span", "usage-whose", "usage-holders"]) {
      $(id).addEventListener("change", reload);
    }
    $("usage-form").addEventListener("submit", (event) => event.preventDefault());
    reload();
  });
})();
