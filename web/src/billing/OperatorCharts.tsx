// The operator view's charts, in the style of SpendChart: plain SVG with a
// text summary for screen readers and the same numbers as a table.
import type { OperatorMarketplaceQuery } from '../gql/graphql';
import { formatMoney, parseDecimal } from '../money';

type Overview = OperatorMarketplaceQuery['marketplaceOverview'];
type Volume = Overview['volume'];
type Supply = Overview['gpuSupply'];

const FEE = '#f0883e';
const HOST = '#1f6feb';
const DAY_MS = 86_400_000;

/** The UTC days of `[from, to)`. */
function days(from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(from.slice(0, 10)); t < Date.parse(to); t += DAY_MS) {
    out.push(new Date(t).toISOString().slice(0, 10));
  }
  return out;
}

/** Volume per UTC day, each bar split into the hosts' share and the platform fee. */
export function VolumeChart({ volume, from, to }: { volume: Volume; from: string; to: string }) {
  const dayList = days(from, to);
  const cur = volume.currency;
  const byDay = new Map(volume.points.map((p) => [p.bucketStartUtc.slice(0, 10), p]));
  const amount = (d: string, f: 'volume' | 'fees' | 'hostEarnings') => {
    const p = byDay.get(d);
    return p ? parseDecimal(p[f]) : 0n;
  };
  const max = dayList.reduce((m, d) => (amount(d, 'volume') > m ? amount(d, 'volume') : m), 0n);
  if (volume.points.length === 0) {
    return <p className="billing-empty">No usage charged in these {dayList.length} days.</p>;
  }
  const W = 720;
  const H = 220;
  const padL = 8;
  const padB = 28;
  const plotH = H - padB - 22;
  const slot = (W - padL) / dayList.length;
  const barW = Math.max(3, slot * 0.7);
  // Heights in floating point are only for drawing; amounts stay exact.
  const h = (v: bigint) => (max <= 0n || v <= 0n ? 0 : Math.max(1, (Number(v) / Number(max)) * plotH));
  const every = Math.max(1, Math.ceil(dayList.length / 10));
  const summary = `Marketplace volume per day over ${dayList.length} days: ${formatMoney(
    volume.totalVolume,
    cur,
  )} charged to renters, of which ${formatMoney(volume.totalFees, cur)} platform fees and ${formatMoney(
    volume.totalHostEarnings,
    cur,
  )} to hosts.`;
  return (
    <div className="billing-chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={summary} className="billing-chart-svg">
        <line x1={padL} x2={W} y1={H - padB - plotH} y2={H - padB - plotH} stroke="#d8dee4" strokeDasharray="4 4" />
        <text x={padL} y={H - padB - plotH - 4} fontSize="11" fill="#57606a">
          {`${formatMoney(max, cur)} (highest day)`}
        </text>
        <line x1={padL} x2={W} y1={H - padB} y2={H - padB} stroke="#8c959f" />
        {dayList.map((d, i) => {
          const x = padL + i * slot + (slot - barW) / 2;
          const hostH = h(amount(d, 'hostEarnings'));
          const feeH = h(amount(d, 'fees'));
          return (
            <g key={d}>
              {hostH > 0 && (
                <rect x={x} y={H - padB - hostH} width={barW} height={hostH} fill={HOST}>
                  <title>{`${d} hosts: ${formatMoney(amount(d, 'hostEarnings'), cur)}`}</title>
                </rect>
              )}
              {feeH > 0 && (
                <rect x={x} y={H - padB - hostH - feeH} width={barW} height={feeH} fill={FEE}>
                  <title>{`${d} platform fees: ${formatMoney(amount(d, 'fees'), cur)}`}</title>
                </rect>
              )}
              {i % every === 0 && (
                <text x={x + barW / 2} y={H - 10} textAnchor="middle" fontSize="11" fill="#57606a">
                  {d.slice(5)}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <ul className="billing-legend" aria-hidden="true">
        <li>
          <span className="billing-swatch" style={{ background: HOST }} /> hosts' share
        </li>
        <li>
          <span className="billing-swatch" style={{ background: FEE }} /> platform fees
        </li>
      </ul>
      <details className="billing-chart-table">
        <summary>Volume and fees per day as a table</summary>
        {/* Focusable, so the table can be scrolled sideways from the keyboard. */}
        <div className="scroll" tabIndex={0} role="region" aria-label="Volume and fees per day, as a table">
          <table>
            <caption className="billing-sr">Marketplace volume and platform fees per UTC day ({cur})</caption>
            <thead>
              <tr>
                <th scope="col">Day (UTC)</th>
                <th scope="col">Volume</th>
                <th scope="col">Hosts</th>
                <th scope="col">Fees</th>
                <th scope="col">Fee adjustments</th>
                <th scope="col">Postings</th>
              </tr>
            </thead>
            <tbody>
              {volume.points.map((p) => (
                <tr key={p.bucketStartUtc} data-testid="op-volume-day" data-day={p.bucketStartUtc.slice(0, 10)}>
                  <th scope="row">{p.bucketStartUtc.slice(0, 10)}</th>
                  <td title={`exact ${p.volume}`}>{formatMoney(p.volume, cur)}</td>
                  <td title={`exact ${p.hostEarnings}`}>{formatMoney(p.hostEarnings, cur)}</td>
                  <td title={`exact ${p.fees}`}>{formatMoney(p.fees, cur)}</td>
                  <td title={`exact ${p.feeAdjustments}`}>{formatMoney(p.feeAdjustments, cur)}</td>
                  <td>{p.postings}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </div>
  );
}

function share(part: number, whole: number): string {
  return whole === 0 ? '–' : `${Math.round((part / whole) * 100)} %`;
}

/** GPUs per model: listed, online of those, rented; bars on a common scale. */
export function SupplyChart({ supply }: { supply: Supply }) {
  if (supply.models.length === 0) {
    return <p className="billing-empty">No machines listed and nothing rented.</p>;
  }
  const max = Math.max(1, ...supply.models.map((m) => Math.max(m.listedGpus, m.rentedGpus)));
  // Widths as a share of the largest model, so every bar is on one scale.
  const pct = (n: number) => `${(n / max) * 100}%`;
  const summary = `GPUs now: ${supply.listedGpus} listed, ${supply.onlineGpus} of them online, ${
    supply.rentedGpus
  } rented. ${supply.models
    .map((m) => `${m.gpuModel}: ${m.listedGpus} listed, ${m.onlineGpus} online, ${m.rentedGpus} rented`)
    .join('; ')}.`;
  // HTML bars rather than SVG: the labels keep the page's font size at any
  // width instead of scaling with a viewBox.
  return (
    <div className="billing-chart">
      <div role="img" aria-label={summary} className="supply-chart">
        {supply.models.map((m) => (
          <div key={m.gpuModel} className="supply-row">
            <span className="supply-model">{m.gpuModel}</span>
            <span className="supply-bars">
              <span className="supply-track">
                <span
                  className="supply-bar"
                  style={{ width: pct(m.listedGpus), background: '#d8dee4' }}
                  title={`${m.gpuModel}: ${m.listedGpus} listed`}
                />
                <span
                  className="supply-bar"
                  style={{ width: pct(m.onlineGpus), background: '#2da44e' }}
                  title={`${m.gpuModel}: ${m.onlineGpus} online`}
                />
              </span>
              <span className="supply-track">
                <span
                  className="supply-bar"
                  style={{ width: pct(m.rentedGpus), background: HOST }}
                  title={`${m.gpuModel}: ${m.rentedGpus} rented`}
                />
              </span>
            </span>
            <span className="supply-count">{`${m.rentedGpus}/${m.listedGpus}`}</span>
          </div>
        ))}
      </div>
      <ul className="billing-legend" aria-hidden="true">
        <li>
          <span className="billing-swatch" style={{ background: '#d8dee4' }} /> listed
        </li>
        <li>
          <span className="billing-swatch" style={{ background: '#2da44e' }} /> online
        </li>
        <li>
          <span className="billing-swatch" style={{ background: HOST }} /> rented
        </li>
      </ul>
      {/* Focusable, so the table can be scrolled sideways from the keyboard. */}
      <div className="scroll" tabIndex={0} role="region" aria-label="GPU supply per model, as a table">
        <table className="billing-table">
          <caption className="billing-sr">GPUs per model now</caption>
          <thead>
            <tr>
              <th scope="col">GPU model</th>
              <th scope="col">Listed</th>
              <th scope="col">Online</th>
              <th scope="col">Rented</th>
              <th scope="col">Rented of listed</th>
            </tr>
          </thead>
          <tbody>
            {supply.models.map((m) => (
              <tr key={m.gpuModel} data-testid="op-supply-row" data-model={m.gpuModel}>
                <th scope="row">
                  {m.gpuModel}
                  <br />
                  <small>
                    {m.listedMachines} machine{m.listedMachines === 1 ? '' : 's'}
                  </small>
                </th>
                <td data-testid="op-listed">{m.listedGpus}</td>
                <td data-testid="op-online">{m.onlineGpus}</td>
                <td data-testid="op-rented">{m.rentedGpus}</td>
                <td>{share(m.rentedListedGpus, m.listedGpus)}</td>
              </tr>
            ))}
          </tbody>
          <tfoot>
            <tr>
              <th scope="row">All models</th>
              <td data-testid="op-listed-total">{supply.listedGpus}</td>
              <td data-testid="op-online-total">{supply.onlineGpus}</td>
              <td data-testid="op-rented-total">{supply.rentedGpus}</td>
              <td>{share(supply.rentedListedGpus, supply.listedGpus)}</td>
            </tr>
          </tfoot>
        </table>
      </div>
    </div>
  );
}
