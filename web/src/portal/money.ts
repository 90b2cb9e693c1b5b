// Money and the earnings preview, in the settlement currency.

const formatters = new Map<string, Intl.NumberFormat>();

function formatter(currency: string, digits?: number): Intl.NumberFormat {
  const key = `${currency}/${digits ?? ''}`;
  let f = formatters.get(key);
  if (!f) {
    f = new Intl.NumberFormat(undefined, {
      style: 'currency',
      currency,
      ...(digits === undefined ? {} : { minimumFractionDigits: digits, maximumFractionDigits: digits }),
    });
    formatters.set(key, f);
  }
  return f;
}

/** `amount` (a Decimal string or number) in `currency`; `digits` for sub-cent prices. */
export function money(amount: string | number, currency: string, digits?: number): string {
  const n = typeof amount === 'number' ? amount : Number(amount);
  if (!Number.isFinite(n)) return `${amount} ${currency}`;
  try {
    return formatter(currency, digits).format(n);
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
export function minorUnits(amount: string, currency: string): string {
  let digits = 2;
  try {
    digits = formatter(currency).resolvedOptions().maximumFractionDigits ?? 2;
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
