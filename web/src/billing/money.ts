// Exact decimal amounts from the API (`Decimal` scalars are strings), kept as
// scaled BigInts; rounded half-even only for display, as the invoices are.

/** Internal scale: 12 decimals (the API gives at most 9). */
const SCALE = 12;
const ONE = 10n ** BigInt(SCALE);

/** A decimal string ("-12.345") as a BigInt scaled by 10^12. */
export function parseDecimal(value: string): bigint {
  const m = /^([+-])?(\d*)(?:\.(\d*))?$/.exec(value.trim());
  if (!m) throw new Error(`not a decimal: ${value}`);
  const int = m[2] || '0';
  const frac = (m[3] ?? '').slice(0, SCALE).padEnd(SCALE, '0');
  const n = BigInt(int) * ONE + BigInt(frac);
  return m[1] === '-' ? -n : n;
}

/** Divides, rounding half to even. */
export function divHalfEven(n: bigint, d: bigint): bigint {
  if (d < 0n) return divHalfEven(-n, -d);
  const neg = n < 0n;
  const a = neg ? -n : n;
  let q = a / d;
  const r2 = (a % d) * 2n;
  if (r2 > d || (r2 === d && q % 2n === 1n)) q += 1n;
  return neg ? -q : q;
}

/** A scaled amount as a decimal string with `digits` decimals, half-even. */
export function toFixedHalfEven(n: bigint, digits: number): string {
  const q = divHalfEven(n, 10n ** BigInt(SCALE - digits));
  const neg = q < 0n;
  const s = (neg ? -q : q).toString().padStart(digits + 1, '0');
  const body = digits > 0 ? `${s.slice(0, s.length - digits)}.${s.slice(s.length - digits)}` : s;
  return neg ? `-${body}` : body;
}

/** `price per hour × seconds / 3600`, exact at the internal scale (half-even). */
export function costOfSeconds(pricePerHour: string, seconds: number): bigint {
  return divHalfEven(parseDecimal(pricePerHour) * BigInt(Math.max(0, Math.floor(seconds))), 3600n);
}

const formatters = new Map<string, Intl.NumberFormat>();

function formatter(currency: string): Intl.NumberFormat {
  let f = formatters.get(currency);
  if (!f) {
    // The currency's minor units (2 for USD, 0 for JPY, 3 for KWD).
    const digits = new Intl.NumberFormat('en-US', { style: 'currency', currency }).resolvedOptions()
      .maximumFractionDigits ?? 2;
    f = new Intl.NumberFormat('en-US', {
      style: 'currency',
      currency,
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    });
    formatters.set(currency, f);
  }
  return f;
}

export function minorUnits(currency: string): number {
  return formatter(currency).resolvedOptions().maximumFractionDigits ?? 2;
}

/** Money in its currency's minor units, rounded half-even from the exact amount. */
export function formatMoney(amount: string | bigint, currency: string, extraDigits = 0): string {
  const n = typeof amount === 'bigint' ? amount : parseDecimal(amount);
  const digits = minorUnits(currency) + extraDigits;
  const fixed = toFixedHalfEven(n, digits);
  if (extraDigits === 0) {
    // Intl formats a decimal string exactly (no float on the way).
    return (formatter(currency).format as unknown as (v: string) => string)(fixed);
  }
  return `${fixed} ${currency}`;
}

/** Seconds as "2 d 3 h 4 min" (the two largest units). */
export function formatDuration(total: number): string {
  const s = Math.max(0, Math.floor(total));
  const parts: [number, string][] = [
    [Math.floor(s / 86400), 'd'],
    [Math.floor((s % 86400) / 3600), 'h'],
    [Math.floor((s % 3600) / 60), 'min'],
    [s % 60, 's'],
  ];
  const first = parts.findIndex(([v]) => v > 0);
  if (first === -1) return '0 s';
  return parts
    .slice(first, first + 2)
    .filter(([v]) => v > 0)
    .map(([v, u]) => `${v} ${u}`)
    .join(' ');
}

