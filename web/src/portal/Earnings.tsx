import { useEffect, useId, useRef, useState } from 'react';
import { request, wireName } from '../api';
import type {
  HostEarningsOverviewQuery,
  HostStatementsAndPayoutsQuery,
  MachineFieldsFragment,
} from '../gql/graphql';
import { HostStatementsAndPayouts } from '../operations';
import { ErrorBox } from '../ui';
import { formatMoney, moneyFine, moneyFromMinorUnits } from '../money';
import { periodText, StatementDetail, type OpenStatement } from './StatementDetail';

export type Overview = HostEarningsOverviewQuery;
type Day = Overview['earningsByMachine']['days'][number];

const COLORS = ['#1f6feb', '#2f7d32', '#b35900', '#8250df', '#c62828', '#0a7ea4'];
const DAY_MS = 86_400_000;

/** The chart's window: the last `days` UTC days, today included. */
export function earningsWindow(days = 14): { from: string; to: string; days: string[] } {
  const now = new Date();
  const tomorrow = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()) + DAY_MS;
  const from = tomorrow - days * DAY_MS;
  const list = Array.from({ length: days }, (_, i) => new Date(from + i * DAY_MS).toISOString().slice(0, 10));
  return { from: new Date(from).toISOString(), to: new Date(tomorrow).toISOString(), days: list };
}

export function Earnings({
  overview,
  error,
  machines,
  days,
}: {
  overview: Overview | null;
  error: unknown;
  machines: MachineFieldsFragment[] | null;
  days: string[];
}) {
  return (
    <section aria-labelledby="earnings-title" className="card">
      <h2 id="earnings-title">Earnings</h2>
      <ErrorBox error={error} />
      {overview === null ? (
        !error && <p>Loading…</p>
      ) : (
        <>
          <dl className="figures totals">
            <div>
              <dt>Earned in total</dt>
              <dd data-testid="earnings-total">{moneyFine(overview.hostEarnings.total, overview.hostEarnings.currency)}</dd>
            </div>
            <div>
              <dt>Last {days.length} days, after fees and credits</dt>
              <dd>{moneyFine(overview.earningsByMachine.total, overview.earningsByMachine.currency)}</dd>
            </div>
            <div>
              <dt>Platform fees, last {days.length} days</dt>
              <dd>{moneyFine(overview.earningsByMachine.totalFee, overview.earningsByMachine.currency)}</dd>
            </div>
          </dl>
          <EarningsChart
            rows={overview.earningsByMachine.days}
            currency={overview.earningsByMachine.currency}
            machines={machines ?? []}
            days={days}
          />
        </>
      )}
      <StatementsAndPayouts machines={machines} />
    </section>
  );
}

function EarningsChart({
  rows,
  currency,
  machines,
  days,
}: {
  rows: Day[];
  currency: string;
  machines: MachineFieldsFragment[];
  days: string[];
}) {
  const id = useId();
  if (rows.length === 0) {
    return (
      <p className="empty" data-testid="earnings-empty">
        No earnings in the last {days.length} days yet: they appear here, per machine and day, once renters use your
        machines.
      </p>
    );
  }
  const name = (machineId: string | null | undefined) =>
    machineId ? (machines.find((m) => m.id === machineId)?.name ?? machineId.slice(0, 8)) : 'earlier usage';
  const keys = [...new Set(rows.map((r) => r.machineId ?? ''))];
  const color = (key: string) => COLORS[keys.indexOf(key) % COLORS.length];
  const byDay = new Map<string, Day[]>();
  for (const r of rows) byDay.set(r.dayUtc.slice(0, 10), [...(byDay.get(r.dayUtc.slice(0, 10)) ?? []), r]);
  const dayTotal = (d: string) => (byDay.get(d) ?? []).reduce((s, r) => s + Math.max(0, Number(r.total)), 0);
  const max = Math.max(...days.map(dayTotal), 1e-9);

  const W = 640;
  const H = 220;
  const pad = { l: 56, r: 8, t: 8, b: 28 };
  const plotW = W - pad.l - pad.r;
  const plotH = H - pad.t - pad.b;
  const slot = plotW / days.length;
  const bar = slot * 0.7;

  return (
    <figure className="chart" aria-labelledby={`${id}-cap`}>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby={`${id}-cap`} aria-describedby={`${id}-table`}>
        <line x1={pad.l} x2={W - pad.r} y1={pad.t + plotH} y2={pad.t + plotH} stroke="#57606a" />
        {[0, 0.5, 1].map((f) => (
          <text key={f} x={pad.l - 4} y={pad.t + plotH - f * plotH + 4} textAnchor="end" fontSize="11" fill="#57606a">
            {moneyFine(max * f, currency)}
          </text>
        ))}
        {days.map((d, i) => {
          let y = pad.t + plotH;
          return (
            <g key={d}>
              {(byDay.get(d) ?? []).map((r) => {
                const h = (Math.max(0, Number(r.total)) / max) * plotH;
                y -= h;
                return (
                  <rect
                    key={r.machineId ?? ''}
                    x={pad.l + i * slot + (slot - bar) / 2}
                    y={y}
                    width={bar}
                    height={h}
                    fill={color(r.machineId ?? '')}
                  >
                    <title>{`${d} · ${name(r.machineId)}: ${moneyFine(r.total, currency)}`}</title>
                  </rect>
                );
              })}
              {i % 2 === 0 && (
                <text x={pad.l + i * slot + slot / 2} y={H - 8} textAnchor="middle" fontSize="11" fill="#57606a">
                  {d.slice(5)}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <figcaption id={`${id}-cap`}>
        Earnings per machine and UTC day, {days[0]} to {days[days.length - 1]}, in {currency}.
        <span className="legend">
          {keys.map((k) => (
            <span key={k}>
              <span className="swatch" style={{ background: color(k) }} aria-hidden="true" /> {name(k || null)}
            </span>
          ))}
        </span>
      </figcaption>
      <details>
        <summary>The chart as a table</summary>
        {/* Focusable, so the table can be scrolled sideways from the keyboard. */}
        <div className="scroll" tabIndex={0} role="region" aria-label="Earnings per machine and day, as a table">
          <table id={`${id}-table`}>
            <caption className="visually-hidden">Earnings per machine and day</caption>
            <thead>
              <tr>
                <th scope="col">Day</th>
                <th scope="col">Machine</th>
                <th scope="col">GPU-hours</th>
                <th scope="col">Gross</th>
                <th scope="col">Fee</th>
                <th scope="col">Credits</th>
                <th scope="col">Earned</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={`${r.dayUtc}-${r.machineId ?? ''}`}>
                  <td>{r.dayUtc.slice(0, 10)}</td>
                  <td>{name(r.machineId)}</td>
                  <td>{(r.seconds / 3600).toFixed(r.seconds < 36 ? 4 : 2)}</td>
                  <td>{moneyFine(r.gross, currency)}</td>
                  <td>{moneyFine(r.fee, currency)}</td>
                  <td>{moneyFine(r.downtimeCredits, currency)}</td>
                  <td>{moneyFine(r.total, currency)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </figure>
  );
}

type StatementSummary = HostStatementsAndPayoutsQuery['statements'][number];

function statementName(s: StatementSummary): string {
  return `${s.number != null ? `No. ${s.number}` : 'Draft'}, ${periodText(s)}`;
}

function StatementsAndPayouts({ machines }: { machines: MachineFieldsFragment[] | null }) {
  const [data, setData] = useState<HostStatementsAndPayoutsQuery | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [open, setOpen] = useState<OpenStatement | null>(null);
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    request(HostStatementsAndPayouts).then(setData).catch(setError);
  }, []);

  const isOpen = (which: OpenStatement) =>
    open !== null && (open === 'preview' ? which === 'preview' : which !== 'preview' && which.id === open.id);
  const opener = (which: OpenStatement) => ({
    type: 'button' as const,
    className: 'link',
    'aria-expanded': isOpen(which),
    'aria-controls': isOpen(which) ? 'statement-detail' : undefined,
    onClick: () => setOpen(isOpen(which) ? null : which),
  });

  return (
    <>
      <div className="cols">
        <div>
          <h3 id="statements-title" tabIndex={-1} ref={heading}>
            Statements
          </h3>
          <p>
            <button {...opener('preview')}>Current period so far</button>
          </p>
          {error ? (
            <ErrorBox error={error} />
          ) : data === null ? (
            <p>Loading…</p>
          ) : data.statements.length === 0 ? (
            <p className="empty" data-testid="statements-empty">
              No statements yet: one is finalized at the end of each period with earnings.
            </p>
          ) : (
            <ul className="plain" aria-labelledby="statements-title">
              {data.statements.map((s) => (
                <li key={s.id ?? s.periodEndUtc}>
                  {s.id ? (
                    <button {...opener({ id: s.id })}>{statementName(s)}</button>
                  ) : (
                    statementName(s)
                  )}
                  : {formatMoney(s.earnings, s.currency)} ({wireName(s.state)})
                </li>
              ))}
            </ul>
          )}
        </div>
        <div>
          <h3>Payouts</h3>
          {error ? null : data === null ? (
            <p>Loading…</p>
          ) : data.payouts.length === 0 ? (
            <p className="empty" data-testid="payouts-empty">
              No payouts yet: earnings are paid out to your connected account once they reach the minimum.
            </p>
          ) : (
            <ul className="plain">
              {data.payouts.map((p) => (
                <li key={p.id}>
                  {new Date(p.createdAtUtc).toLocaleDateString()}: {moneyFromMinorUnits(p.amount, p.currency)} (
                  {wireName(p.state)}
                  {p.failureReason ? `: ${p.failureReason}` : ''})
                </li>
              ))}
            </ul>
          )}
        </div>
      </div>
      {open !== null && (
        <StatementDetail
          which={open}
          machines={machines}
          onClose={() => {
            setOpen(null);
            heading.current?.focus();
          }}
        />
      )}
    </>
  );
}
