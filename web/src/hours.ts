// Whole UTC hours, as reserved blocks and resale listings are made of
// (docs/reservations.md): both pages show and take them in UTC, so a block
// reads the same to the host, the renter and the API.

export const HOUR_MS = 3_600_000;

/** The start of the UTC hour `ms` falls in. */
export function hourStart(ms: number): number {
  return Math.floor(ms / HOUR_MS) * HOUR_MS;
}

/** The first whole hour that has not begun at `ms` (the hour under way has). */
export function nextHour(ms: number): number {
  return hourStart(ms) + HOUR_MS;
}

/** An instant from the API as `2027-01-04 10:00 UTC`. */
export function utcHour(iso: string): string {
  const d = new Date(iso).toISOString();
  return `${d.slice(0, 10)} ${d.slice(11, 16)} UTC`;
}

/** A block `[from, to)` as `2027-01-04 10:00 – 14:00 UTC` (the day once when the same). */
export function utcRange(from: string, to: string): string {
  const a = new Date(from).toISOString();
  const b = new Date(to).toISOString();
  const end = a.slice(0, 10) === b.slice(0, 10) ? b.slice(11, 16) : `${b.slice(0, 10)} ${b.slice(11, 16)}`;
  return `${a.slice(0, 10)} ${a.slice(11, 16)} – ${end} UTC`;
}

/** An instant as the value of a `datetime-local` input read as UTC (`2027-01-04T10:00`). */
export function toUtcInput(ms: number): string {
  return new Date(ms).toISOString().slice(0, 16);
}

/**
 * A `datetime-local` value read as UTC, as the API's `DateTime`; null when it
 * is not a date and time.
 */
export function fromUtcInput(value: string): string | null {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(value.trim())) return null;
  const ms = Date.parse(`${value.trim()}:00Z`);
  return Number.isNaN(ms) ? null : new Date(ms).toISOString();
}

/** The start of an id, enough to tell a few apart at a glance. */
export function shortId(id: string): string {
  return id.slice(0, 8);
}
