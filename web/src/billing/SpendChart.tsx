import type { BillingSpendSeriesQuery } from '../gql/graphql';
import { formatMoney, parseDecimal } from '../money';

type Series = BillingSpendSeriesQuery['usageSeries'];

const COLORS = ['#1f6feb', '#f0883e', '#2da44e', '#a371f7', '#d4a72c', '#cf222e', '#1b7c83', '#8c959f'];
const DAY_MS = 86_400_000;

/** The UTC day starts of `[from, to)`. */
function days(from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(from); t < Date.parse(to); t += DAY_MS) out.push(new Date(t).toISOString().slice(0, 10));
  return out;
}

/** Spend per UTC day, stacked by GPU model, in plain SVG with a table beside it. */
export function SpendChart({ series }: { series: Series }) {
  const dayList = days(series.fromUtc, series.toUtc);
  const keys = [...new Set(series.points.map((p) => p.key ?? 'unknown'))].sort();
  const cell = new Map<string, bigint>();
  for (const p of series.points) {
    const k = `${p.bucketStartUtc.slice(0, 10)}|${p.key ?? 'unknown'}`;
    cell.set(k, (cell.get(k) ?? 0n) + parseDecimal(p.spend));
  }
  const dayTotal = (d: string) => keys.reduce((s, k) => s + (cell.get(`${d}|${k}`) ?? 0n), 0n);
  const max = dayList.reduce((m, d) => (dayTotal(d) > m ? dayTotal(d) : m), 0n);
  const cur = series.currency;

  if (series.points.length === 0) {
    return <p className="billing-empty">No usage in the last {dayList.length} days.</p>;
  }

  const W = 720;
  const H = 220;
  const padL = 8;
  const padB = 28;
  const plotH = H - padB - 22;
  const slot = (W - padL) / dayList.length;
  const barW = Math.max(4, slot * 0.7);
  // Heights in floating point are only for drawing; amounts stay exact.
  const h = (v: bigint) => (max === 0n ? 0 : (Number(v) / Number(max)) * plotH);
  const summary = `Spend per day over the last ${dayList.length} days, stacked by GPU model: total ${formatMoney(
    series.totalSpend,
    cur,
  )}; ${keys.join(', ')}.`;

  return (
    <div className="billing-chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={summary} className="billing-chart-svg">
        <line x1={padL} x2={W} y1={H - padB - plotH} y2={H - padB - plotH} stroke="#d8dee4" strokeDasharray="4 4" />
        <text x={padL} y={H - padB - plotH - 4} fontSize="11" fill="#57606a">
          {`${formatMoney(max, cur)} (highest day)`}
        </text>
        <line x1={padL} x2={W} y1={H - padB} y2={H - padB} stroke="#8c959f" />
        {dayList.map((d, i) => {
          let y = H - padB;
          const x = padL + i * slot + (slot - barW) / 2;
          return (
            <g key={d}>
              {keys.map((k, ki) => {
                const v = cell.get(`${d}|${k}`) ?? 0n;
                if (v <= 0n) return null;
                const bh = Math.max(1, h(v));
                y -= bh;
                return (
                  <rect key={k} x={x} y={y} width={barW} height={bh} fill={COLORS[ki % COLORS.length]}>
                    <title>{`${d} ${k}: ${formatMoney(v, cur)}`}</title>
                  </rect>
                );
              })}
              {(i % 2 === 0 || dayList.length <= 7) && (
                <text x={x + barW / 2} y={H - 10} textAnchor="middle" fontSize="11" fill="#57606a">
                  {d.slice(5)}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <ul className="billing-legend" aria-hidden="true">
        {keys.map((k, ki) => (
          <li key={k}>
            <span className="billing-swatch" style={{ background: COLORS[ki % COLORS.length] }} /> {k}
          </li>
        ))}
      </ul>
      <details className="billing-chart-table">
        <summary>Spend per day as a table</summary>
        {/* Focusable, so the table can be scrolled sideways from the keyboard. */}
        <div className="scroll" tabIndex={0} role="region" aria-label="Spend per day, as a table">
          <table>
            <caption className="billing-sr">Spend per UTC day by GPU model ({cur})</caption>
            <thead>
              <tr>
                <th scope="col">Day (UTC)</th>
                {keys.map((k) => (
                  <th scope="col" key={k}>
                    {k}
                  </th>
                ))}
                <th scope="col">Total</th>
              </tr>
            </thead>
            <tbody>
              {dayList
                .filter((d) => dayTotal(d) !== 0n)
                .map((d) => (
                  <tr key={d}>
                    <th scope="row">{d}</th>
                    {keys.map((k) => (
                      <td key={k}>{formatMoney(cell.get(`${d}|${k}`) ?? 0n, cur)}</td>
                    ))}
                    <td>{formatMoney(dayTotal(d), cur)}</td>
                  </tr>
                ))}
            </tbody>
          </table>
        </div>
      </details>
    </div>
  );
}
