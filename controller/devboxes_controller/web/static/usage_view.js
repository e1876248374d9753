// What the usage page shows, derived from the answers of GET /api/v1/usage: plain data in,
// plain data and text out, no DOM, so that it can be run and checked on its own.

const DAY_MS = 86400000;

/** "2026-12-08": the UTC day of a moment in milliseconds. */
export function utcDay(ms) {
  return new Date(ms).toISOString().slice(0, 10);
}

function dayMs(day) {
  return Date.parse(`${day}T00:00:00Z`);
}

/** The spans the page offers, as the API's since and until (UTC days, both included). */
export const SPANS = {
  "7d": "Last 7 days",
  "30d": "Last 30 days",
  month: "This month",
};

export function spanDays(span, now = Date.now()) {
  const until = utcDay(now);
  if (span === "month") return { since: `${until.slice(0, 8)}01`, until };
  const count = span === "30d" ? 30 : 7;
  return { since: utcDay(dayMs(until) - (count - 1) * DAY_MS), until };
}

/** The query string of a report: the span, the grouping, and everyone's or the caller's. */
export function usageQuery(days, groupBy, everyone) {
  const query = new URLSearchParams({ since: days.since, until: days.until, group_by: groupBy });
  if (everyone) query.set("all", "true");
  return query.toString();
}

/** Hours of seconds, in one decimal: "2.5", "0", "<0.1", "312". */
export function hoursText(seconds) {
  if (!seconds) return "0";
  const hours = seconds / 3600;
  if (hours < 0.05) return "<0.1";
  if (hours >= 100) return String(Math.round(hours));
  return hours.toFixed(1);
}

/** Busy of the device-seconds whose utilization is known, as the SDK's busy_share; null
 * when none is. */
export function busyShare(line) {
  const known = line.busy_seconds + line.idle_seconds;
  return known === 0 ? null : line.busy_seconds / known;
}

/** "67%", or "—" when no reading of the devices' utilization came in. */
export function shareText(line) {
  const share = busyShare(line);
  return share === null ? "—" : `${Math.round(share * 100)}%`;
}

/** The first and the last UTC day a report covers (its until is the next midnight). */
export function reportDays(report) {
  const since = utcDay(Date.parse(report.since));
  const until = utcDay(Date.parse(report.until) - DAY_MS);
  return { since, until };
}

/** Every UTC day from since to until, both included. */
export function daysBetween(since, until) {
  const found = [];
  for (let ms = dayMs(since); ms <= dayMs(until); ms += DAY_MS) found.push(utcDay(ms));
  return found;
}

/** "recorded until 14:05 UTC", the day named too when it is not the report's last. */
export function recordedText(report) {
  if (!report.recorded_until) return "nothing recorded yet";
  const at = new Date(Date.parse(report.recorded_until)).toISOString();
  const clock = at.slice(11, 16);
  const day = at.slice(0, 10);
  return day === reportDays(report).until
    ? `recorded until ${clock} UTC`
    : `recorded until ${day} ${clock} UTC`;
}

/** What the report covers: its whole UTC days and how far the recording reached. */
export function coverageText(report) {
  const { since, until } = reportDays(report);
  const count = daysBetween(since, until).length;
  const days = count === 1 ? `the UTC day ${since}` : `the whole UTC days ${since} to ${until} (${count} days)`;
  const whose = report.scope === null || report.scope === undefined
    ? "Everyone's GPU usage"
    : `GPU usage of ${report.scope}`;
  return `${whose} over ${days}; ${recordedText(report)}.`;
}

/** Nothing held, nothing waited for, in the whole span. */
export function isEmpty(report) {
  return report.total.allocated_seconds === 0 && report.total.waiting_seconds === 0;
}

const ZERO = {
  allocated_seconds: 0, busy_seconds: 0, idle_seconds: 0, unknown_seconds: 0, waiting_seconds: 0,
};

/** Each profile's days, every day of the span present (a day without usage as zeros):
 * [{profile, days: [{day, allocated_seconds, busy_seconds, …}]}], by profile name. */
export function dailySeries(report) {
  const { since, until } = reportDays(report);
  const days = daysBetween(since, until);
  const byProfile = new Map();
  for (const entry of report.days) {
    if (!byProfile.has(entry.profile)) byProfile.set(entry.profile, new Map());
    byProfile.get(entry.profile).set(entry.day, entry);
  }
  return [...byProfile.keys()].sort().map((profile) => ({
    profile,
    days: days.map((day) => ({ ...ZERO, ...(byProfile.get(profile).get(day) || {}), day, profile })),
  }));
}

/** A round top for a chart's axis, in hours: 1, 2, 5, 10, 20, 50, … at or above the most. */
export function axisTop(hours) {
  if (hours <= 1) return 1;
  let step = 1;
  while (true) {
    for (const factor of [1, 2, 5]) {
      if (step * factor >= hours) return step * factor;
    }
    step *= 10;
  }
}

/** Where each day's bars go in a chart of width by height (the plot area, in SVG units):
 * the allocated bar, the busy bar inside it from the bottom, and the axis top in hours. */
export function chartBars(days, width, height) {
  const top = axisTop(Math.max(0, ...days.map((d) => d.allocated_seconds / 3600)));
  const slot = width / Math.max(1, days.length);
  const bar = Math.max(1, Math.min(slot * 0.7, 48));
  const scale = (seconds) => (seconds / 3600 / top) * height;
  return {
    top,
    slot,
    bars: days.map((day, index) => {
      const x = index * slot + (slot - bar) / 2;
      const allocated = scale(day.allocated_seconds);
      const busy = scale(day.busy_seconds);
      return {
        day: day.day,
        x,
        width: bar,
        allocated: { y: height - allocated, height: allocated },
        busy: { y: height - busy, height: busy },
        title: dayTitle(day),
      };
    }),
  };
}

/** "2026-12-08: 2.5 h allocated, 1.0 h busy (40%)", a day's bar read out. */
export function dayTitle(day) {
  const share = busyShare(day);
  const rest = share === null ? "" : ` (${shareText(day)} busy)`;
  return `${day.day}: ${hoursText(day.allocated_seconds)} h allocated, ` +
    `${hoursText(day.busy_seconds)} h busy${rest}`;
}

/** Which days get a label under a chart: every day of a week, about six of a month, and
 * always the last. */
export function labelledDays(count) {
  const every = count <= 8 ? 1 : Math.ceil(count / 6);
  const shown = new Set();
  for (let index = count - 1; index >= 0; index -= every) shown.add(index);
  return shown;
}

/** The lines that held idle GPUs, most idle first (then by key), at most ``limit``. */
export function idleHolders(lines, limit = 10) {
  return lines
    .filter((line) => line.idle_seconds > 0)
    .sort((a, b) => b.idle_seconds - a.idle_seconds || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .slice(0, limit);
}

/** The cells of a line in the per-profile table. */
export function profileCells(line) {
  return [
    hoursText(line.allocated_seconds),
    hoursText(line.busy_seconds),
    hoursText(line.idle_seconds),
    hoursText(line.unknown_seconds),
    shareText(line),
    hoursText(line.waiting_seconds),
  ];
}

/** The error an API answer carries, as the page shows it. */
export function detailText(data) {
  if (!data || data.detail === undefined) return "unknown error";
  if (typeof data.detail === "string") return data.detail;
  return data.detail.map((e) => e.msg).join("; ");
}
