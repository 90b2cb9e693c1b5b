import { formatMoney, parseDecimal } from '../money';
import type { BalanceEntry } from './BalanceHistory';

/** "2026-12-03 14:05:09 UTC" from an RFC 3339 time. */
export function utcTime(iso: string): string {
  return `${new Date(iso).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/**
 * The running balance of the loaded entries over time, as a step line (a
 * balance holds until the next entry), in plain SVG with a table beside it.
 */
export function RunningBalanceChart({ entries, currency }: { entries: BalanceEntry[]; currency: string }) {
  const points = [...entries].reverse().map((e) => ({ at: Date.parse(e.postedAtUtc), balance: parseDecimal(e.balanceAfter), e }));
  if (points.length === 0) return null;
  const first = points[0];
  const last = points[points.length - 1];
  let low = first.balance;
  let high = first.balance;
  for (const p of points) {
    if (p.balance < low) low = p.balance;
    if (p.balance > high) high = p.balance;
  }

  const W = 800;
  const H = 180;
  const padX = 8;
  const padTop = 6;
  const padBottom = 6;
  const plotH = H - padTop - padBottom;
  // The axis includes zero, so a balance near it reads as near running out.
  const yMin = low < 0n ? low : 0n;
  const yMax = high > 0n ? high : 0n;
  // Floating point only for drawing; the amounts stay exact.
  const span = Number(yMax - yMin) || 1;
  const y = (v: bigint) => padTop + plotH - (Number(v - yMin) / span) * plotH;
  const t0 = first.at;
  const dt = last.at - t0;
  // Entries posted in the same instant are spread evenly instead; a lone
  // entry is drawn as a level line ending at its dot.
  const x = (i: number) =>
    padX + (W - 2 * padX) * (dt > 0 ? (points[i].at - t0) / dt : points.length > 1 ? i / (points.length - 1) : 1);
  let path = `M ${padX} ${y(first.balance)} H ${x(0)}`;
  for (let i = 1; i < points.length; i++) path += ` H ${x(i)} V ${y(points[i].balance)}`;

  const summary = `Running balance over the ${points.length} entries shown, ${utcTime(first.e.postedAtUtc)} to ${utcTime(
    last.e.postedAtUtc,
  )}: from ${formatMoney(first.balance, currency)} to ${formatMoney(last.balance, currency)}; lowest ${formatMoney(
    low,
    currency,
  )}, highest ${formatMoney(high, currency)}.`;

  return (
    <div className="billing-chart">
      {/* Labels in HTML, not in the SVG: they keep the page's font size
          however far the viewBox is scaled. */}
      <p className="balance-chart-label">{`${formatMoney(yMax, currency)} (highest)`}</p>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={summary} className="billing-chart-svg">
        <line x1={padX} x2={W - padX} y1={y(0n)} y2={y(0n)} stroke="#8c959f" />
        <path d={path} fill="none" stroke="#1f6feb" strokeWidth="2" />
        <circle cx={x(points.length - 1)} cy={y(last.balance)} r="3.5" fill="#1f6feb">
          <title>{`${utcTime(last.e.postedAtUtc)}: ${formatMoney(last.balance, currency)}`}</title>
        </circle>
      </svg>
      <p className="balance-chart-axis" aria-hidden="true">
        <span>{utcTime(first.e.postedAtUtc).slice(5, 16)}</span>
        <span>{utcTime(last.e.postedAtUtc).slice(5, 16)}</span>
      </p>
      <details className="billing-chart-table">
        <summary>Running balance as a table</summary>
        {/* Focusable, so the table can be scrolled sideways from the keyboard. */}
        <div className="scroll" tabIndex={0} role="region" aria-label="Running balance, as a table">
          <table>
            <caption className="billing-sr">Running balance after each entry, oldest first ({currency})</caption>
            <thead>
              <tr>
                <th scope="col">Time (UTC)</th>
                <th scope="col">Balance</th>
              </tr>
            </thead>
            <tbody>
              {points.map((p) => (
                <tr key={p.e.cursor}>
                  <th scope="row">{utcTime(p.e.postedAtUtc)}</th>
                  <td>{formatMoney(p.balance, currency)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </div>
  );
}
