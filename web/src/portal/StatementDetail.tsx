import { useEffect, useRef, useState, type ReactNode } from 'react';
import { meterName, request } from '../api';
import type { MachineFieldsFragment, StatementFieldsFragment } from '../gql/graphql';
import { HostStatement, HostStatementPreview } from '../operations';
import { ErrorBox } from '../ui';
import { formatDuration, formatMoney, minorUnits } from '../money';

type Statement = StatementFieldsFragment;
type Line = Statement['lines'][number];

/** Which statement is open: a finalized one by id, or the current period's preview. */
export type OpenStatement = { id: string } | 'preview';

/** An instant of a period's bounds: the date alone at midnight UTC, else with the time. */
function instant(iso: string): string {
  const d = new Date(iso);
  const day = iso.slice(0, 10);
  return d.getUTCHours() === 0 && d.getUTCMinutes() === 0 && d.getUTCSeconds() === 0
    ? day
    : `${day} ${d.toISOString().slice(11, 16)}`;
}

/** A statement's period, half-open as the API has it, in UTC. */
export function periodText(s: { periodStartUtc: string; periodEndUtc: string }): string {
  return `${instant(s.periodStartUtc)} until ${instant(s.periodEndUtc)} UTC`;
}

/** The API's statement amounts carry 9 decimals. */
const API_DECIMALS = 9;

/** One statement with its lines and totals, loaded when opened. */
export function StatementDetail({
  which,
  machines,
  onClose,
}: {
  which: OpenStatement;
  machines: MachineFieldsFragment[] | null;
  onClose: () => void;
}) {
  const [statement, setStatement] = useState<Statement | null>(null);
  const [error, setError] = useState<unknown>(null);
  const heading = useRef<HTMLHeadingElement>(null);
  const key = which === 'preview' ? 'preview' : which.id;

  useEffect(() => {
    let live = true;
    setStatement(null);
    setError(null);
    const load =
      key === 'preview'
        ? request(HostStatementPreview).then((d) => d.statementPreview)
        : request(HostStatement, { id: key }).then((d) => d.statement);
    load.then((s) => live && setStatement(s)).catch((e) => live && setError(e));
    return () => {
      live = false;
    };
  }, [key]);

  // Moves focus to the opened statement, so keyboard and screen reader users land on it.
  useEffect(() => heading.current?.focus(), [key]);

  const title =
    which === 'preview'
      ? 'Current period so far (draft)'
      : statement?.number != null
        ? `Statement No. ${statement.number}`
        : 'Statement';

  return (
    <div className="statement" id="statement-detail" role="region" aria-labelledby="statement-title">
      <div className="statement-head">
        <h3 id="statement-title" tabIndex={-1} ref={heading}>
          {title}
        </h3>
        <button type="button" onClick={onClose}>
          Close statement
        </button>
      </div>
      <ErrorBox error={error} />
      {statement === null ? (
        !error && <p>Loading…</p>
      ) : (
        <StatementBody statement={statement} machines={machines ?? []} />
      )}
    </div>
  );
}

function StatementBody({ statement: s, machines }: { statement: Statement; machines: MachineFieldsFragment[] }) {
  const [exact, setExact] = useState(false);
  const cur = s.currency;
  // Half-even to the currency's minor units, as statements are paid; or every
  // decimal the API gives, for checking sums of fractions of a cent.
  const amount = (value: string) => (
    <data value={value}>{exact ? formatMoney(value, cur, API_DECIMALS - minorUnits(cur)) : formatMoney(value, cur)}</data>
  );
  return (
    <>
      <p className="muted">
        From {periodText(s)}, in {cur}.{' '}
        {s.state === 'DRAFT'
          ? 'Not final: usage still to come in this period is added until the statement is finalized.'
          : `Finalized${s.finalizedAtUtc ? ` ${new Date(s.finalizedAtUtc).toLocaleString()}` : ''}; it never changes.`}
      </p>
      <dl className="figures totals" data-testid="statement-totals">
        <div>
          <dt>Opening balance</dt>
          <dd data-testid="statement-opening">{amount(s.openingBalance)}</dd>
        </div>
        <div>
          <dt>Earnings</dt>
          <dd data-testid="statement-earnings">{amount(s.earnings)}</dd>
        </div>
        <div>
          <dt>Adjustments</dt>
          <dd data-testid="statement-adjustments">{amount(s.adjustments)}</dd>
        </div>
        <div>
          <dt>Payouts</dt>
          <dd data-testid="statement-payouts">{amount(s.payouts)}</dd>
        </div>
        <div>
          <dt>Closing balance</dt>
          <dd data-testid="statement-closing">{amount(s.closingBalance)}</dd>
        </div>
      </dl>
      <label className="check">
        <input type="checkbox" checked={exact} onChange={(e) => setExact(e.target.checked)} /> Show exact amounts (
        {API_DECIMALS} decimals)
      </label>
      {s.lines.length === 0 ? (
        <p className="empty" data-testid="statement-lines-empty">
          No earnings in this period yet: a line appears per machine and meter once renters use your machines.
        </p>
      ) : (
        <StatementLines statement={s} machines={machines} amount={amount} />
      )}
    </>
  );
}

function StatementLines({
  statement: s,
  machines,
  amount,
}: {
  statement: Statement;
  machines: MachineFieldsFragment[];
  amount: (value: string) => ReactNode;
}) {
  const name = (l: Line) =>
    l.machineId
      ? (machines.find((m) => m.id === l.machineId)?.name ?? l.machineId.slice(0, 8))
      : 'Before machines were tracked';
  const seconds = (n: number) => <data value={String(n)}>{formatDuration(n)}</data>;
  return (
    // Focusable, so the table can be scrolled sideways from the keyboard.
    <div className="scroll" tabIndex={0} role="region" aria-label="Statement lines">
      <table className="lines" data-testid="statement-lines">
        <caption className="visually-hidden">Statement lines, one per machine and meter, with the totals</caption>
        <thead>
          <tr>
            <th scope="col">Machine</th>
            <th scope="col">GPU model</th>
            <th scope="col">Meter</th>
            <th scope="col">Period</th>
            <th scope="col">Time</th>
            <th scope="col">Gross</th>
            <th scope="col">Fee</th>
            <th scope="col">Net</th>
            <th scope="col">Downtime credits</th>
            <th scope="col">Amount</th>
          </tr>
        </thead>
        <tbody>
          {s.lines.map((l) => (
            <tr key={`${l.machineId ?? ''}-${meterName(l.meterKind)}-${l.earlierPeriod}`} data-testid="statement-line">
              <td>{name(l)}</td>
              <td>{l.gpuModel ?? '—'}</td>
              <td>{meterName(l.meterKind)}</td>
              <td>{l.earlierPeriod ? 'Earlier period, posted late' : 'This period'}</td>
              <td>{seconds(l.seconds)}</td>
              <td>{amount(l.gross)}</td>
              <td>{amount(l.fee)}</td>
              <td>{amount(l.net)}</td>
              <td>{amount(l.downtimeCredits)}</td>
              <td data-testid="line-amount">{amount(l.amount)}</td>
            </tr>
          ))}
        </tbody>
        <tfoot>
          <tr data-testid="statement-total-row">
            <th scope="row" colSpan={4}>
              Total
            </th>
            <td>{seconds(s.seconds)}</td>
            <td>{amount(s.gross)}</td>
            <td data-testid="total-fee">{amount(s.fee)}</td>
            <td>{amount(s.net)}</td>
            <td>{amount(s.downtimeCredits)}</td>
            <td data-testid="total-amount">{amount(s.earnings)}</td>
          </tr>
        </tfoot>
      </table>
    </div>
  );
}
