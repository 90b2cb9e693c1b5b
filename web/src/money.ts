// Money, one module for both pages. Exact decimal amounts from the API
// (`Decimal` scalars are strings) are kept as scaled BigInts and rounded
// half-even only for display, as the invoices are (the billing dashboard).

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


// What the host portal shows: prices and earnings in the settlement currency,
// in the browser's locale, and the earnings preview.

const localFormatters = new Map<string, Intl.NumberFormat>();

function localFormatter(currency: string, digits?: number): Intl.NumberFormat {
  const key = `${currency}/${digits ?? ''}`;
  let f = localFormatters.get(key);
  if (!f) {
    f = new Intl.NumberFormat(undefined, {
      style: 'currency',
      currency,
      ...(digits === undefined ? {} : { minimumFractionDigits: digits, maximumFractionDigits: digits }),
    });
    localFormatters.set(key, f);
  }
  return f;
}

/** `amount` (a Decimal string or number) in `currency`; `digits` for sub-cent prices. */
export function money(amount: string | number, currency: string, digits?: number): string {
  const n = typeof amount === 'number' ? amount : Number(amount);
  if (!Number.isFinite(n)) return `${amount} ${currency}`;
  try {
    return localFormatter(currency, digits).format(n);
  } catch {
    return `${n.toFixed(digits ?? 2)} ${currency}`;
  }
}

/** Like `money`, with 4 decimals for small non-zero amounts (fractions of a cent add up). */
export function moneyFine(amount: string | number, currency: string): string {
  const n = Number(amount);
  return money(amount, currency, n !== 0 && Math.abs(n) < 1 ? 4 : undefined);
}

/** A whole number of the currency's minor units (payouts), formatted. */
export function moneyFromMinorUnits(amount: string, currency: string): string {
  let digits = 2;
  try {
    digits = localFormatter(currency).resolvedOptions().maximumFractionDigits ?? 2;
  } catch {
    // unknown currency: assume cents
  }
  return money(Number(amount) / 10 ** digits, currency);
}

export interface Preview {
  /** What renters pay per GPU-hour. */
  grossPerGpuHour: number;
  /** After the platform fee; null when the fee rate is unknown. */
  netPerGpuHour: number | null;
  /** For the machine's GPUs, 24 h at the utilisation. */
  grossPerDay: number;
  netPerDay: number | null;
}

/** The earnings preview for a price, fee rate (0..1 or null), GPU count and utilisation (0..100 %). */
export function preview(price: number, feeRate: number | null, gpus: number, utilisationPct: number): Preview {
  const hours = 24 * gpus * (utilisationPct / 100);
  const net = feeRate === null ? null : price * (1 - feeRate);
  return {
    grossPerGpuHour: price,
    netPerGpuHour: net,
    grossPerDay: price * hours,
    netPerDay: net === null ? null : net * hours,
  };
}

export function percent(rate: number): string {
  return new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 2 }).format(rate);
}
