// What the billing tests check amounts with, written apart from the app's
// money.ts so that a rounding bug there is not repeated here: exact decimals
// as BigInts, and USD rounded half-even to cents as the page shows it. Not a
// test file itself (node --test runs only `*.test.mjs`).

const SCALE = 12;

/** A decimal string as a BigInt scaled by 10^12 ("1.50" and "1.5" are equal). @param {string} s */
export function decimal(s) {
  const m = /^(-)?(\d+)(?:\.(\d*))?$/.exec(s.trim());
  if (!m) throw new Error(`not a decimal: ${s}`);
  const n = BigInt(m[2]) * 10n ** BigInt(SCALE) + BigInt((m[3] ?? '').padEnd(SCALE, '0').slice(0, SCALE) || '0');
  return m[1] ? -n : n;
}

/** Whole cents, rounded half to even. @param {bigint} n */
function cents(n) {
  const d = 10n ** BigInt(SCALE - 2);
  const a = n < 0n ? -n : n;
  let q = a / d;
  const r2 = (a % d) * 2n;
  if (r2 > d || (r2 === d && q % 2n === 1n)) q += 1n;
  return n < 0n ? -q : q;
}

const format = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD', minimumFractionDigits: 2, maximumFractionDigits: 2 });

/** USD as the page shows it: "$1,234.56", "-$0.01". @param {string | bigint} amount */
export function usd(amount) {
  const c = cents(typeof amount === 'bigint' ? amount : decimal(amount));
  const a = c < 0n ? -c : c;
  const fixed = `${c < 0n ? '-' : ''}${a / 100n}.${String(a % 100n).padStart(2, '0')}`;
  // A string is formatted exactly, with nothing left to round.
  return format.format(/** @type {any} */ (fixed));
}

/** A signed amount as the history shows it: "+$0.05", "−$0.01" (a minus sign, U+2212). @param {string} amount */
export function signedUsd(amount) {
  const n = decimal(amount);
  if (n < 0n) return `\u2212${usd(-n)}`;
  return `${n > 0n ? '+' : ''}${usd(n)}`;
}

/**
 * The balance history's rows as shown: the rounded and the exact amounts.
 * @param {import('playwright-core').Page} page
 */
export async function historyRows(page) {
  return page.$$eval('[data-testid="billing-history"] tbody tr', (trs) =>
    trs.map((tr) => {
      const cells = tr.querySelectorAll('td');
      const firstLine = (/** @type {Element | null} */ el) => (/** @type {HTMLElement | null} */ (el)?.innerText ?? '').split('\n')[0];
      return {
        cursor: tr.getAttribute('data-cursor') ?? '',
        time: firstLine(tr.querySelector('th')),
        amount: firstLine(cells[0]),
        exactAmount: tr.querySelector('[data-testid="billing-history-amount"]')?.textContent ?? '',
        balance: firstLine(cells[1]),
        exactBalance: tr.querySelector('[data-testid="billing-history-balance"]')?.textContent ?? '',
        kind: firstLine(tr.querySelector('[data-testid="billing-history-kind"]')),
      };
    }),
  );
}
