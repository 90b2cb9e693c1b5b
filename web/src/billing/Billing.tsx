import { useCallback, useEffect, useMemo, useState, type FormEvent, type MouseEvent } from 'react';
import { meterName, request, wireName } from '../api';
import { useSession } from '../session';
import type {
  BillingInstancesQuery,
  BillingInvoicesQuery,
  BillingRunwayQuery,
} from '../gql/graphql';
import { LoginFields } from '../LoginFields';
import { ErrorBox, Layout, SessionExpired, SignedIn } from '../ui';
import { costOfSeconds, formatDuration, formatMoney } from '../money';
import {
  BillingInstances,
  BillingInvoices,
  BillingLogIn,
  BillingRunway,
  BillingSpendSeries,
  BillingUsageCsv,
} from './operations';
import { SpendChart } from './SpendChart';
import { TopUpCard } from './TopUp';
import { OperatorOverview, useBillingViewer } from './Operator';
import { BalanceHistory } from './BalanceHistory';
import { ReservationsCards } from './Reservations';
import { Webhooks } from '../webhooks/Webhooks';

/** How often balance, runway and instances are refreshed. */
const POLL_MS = 5000;
const SERIES_DAYS = 14;

export function Billing() {
  const { token, email, expired, expiredEmail, onAuth, logOut } = useSession();
  return (
    <Layout title="Billing" actions={token && <SignedIn email={email} onLogOut={logOut} />}>
      {token ? (
        <Dashboard />
      ) : (
        <BillingLogin onAuth={onAuth} expired={expired} expiredEmail={expiredEmail} />
      )}
    </Layout>
  );
}

function BillingLogin({
  onAuth,
  expired,
  expiredEmail,
}: {
  onAuth: (token: string, email: string) => void;
  expired: boolean;
  expiredEmail: string | null;
}) {
  const [email, setEmail] = useState(expiredEmail ?? '');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const auth = (await request(BillingLogIn, { email, password })).login;
      onAuth(auth.token, auth.me.email);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <section aria-labelledby="billing-login-title" className="card narrow">
      <h2 id="billing-login-title">Log in to see your billing</h2>
      {expired && <SessionExpired />}
      <p>
        Renters: your balance, spend, instances and invoices. Hosts list machines in the{' '}
        <a href="/portal">host portal</a>.
      </p>
      <form onSubmit={submit} noValidate>
        <LoginFields
          idPrefix="billing"
          email={email}
          password={password}
          onEmail={setEmail}
          onPassword={setPassword}
          error={error}
        />
        <ErrorBox error={error} except={['email', 'password']} />
        <button type="submit" className="primary" disabled={busy}>
          Log in
        </button>
      </form>
    </section>
  );
}

/** One section's data: null while loading, with its own error. */
function usePolled<T>(load: () => Promise<T>, pollMs?: number) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const refresh = useCallback(async () => {
    try {
      setData(await load());
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, [load]);
  useEffect(() => {
    void refresh();
    if (!pollMs) return;
    const timer = window.setInterval(() => void refresh(), pollMs);
    return () => window.clearInterval(timer);
  }, [refresh, pollMs]);
  return { data, error, refresh };
}

/** The billing page's pages, each at its own path so a reload stays on it. */
type View = 'dashboard' | 'webhooks';
const PATHS: Record<View, string> = {
  dashboard: '/billing',
  webhooks: '/billing/webhooks',
};

function viewOfPath(): View {
  const path = window.location.pathname.replace(/\/+$/, '');
  return path === PATHS.webhooks ? 'webhooks' : 'dashboard';
}

function useView(): [View, (view: View) => void] {
  const [view, setView] = useState<View>(viewOfPath);
  useEffect(() => {
    const onPop = () => setView(viewOfPath());
    window.addEventListener('popstate', onPop);
    return () => window.removeEventListener('popstate', onPop);
  }, []);
  const go = useCallback((next: View) => {
    if (viewOfPath() !== next) window.history.pushState(null, '', PATHS[next]);
    setView(next);
  }, []);
  return [view, go];
}

function BillingNav({ view, onGo }: { view: View; onGo: (view: View) => void }) {
  const link = (to: View, label: string) => (
    <a
      href={PATHS[to]}
      aria-current={view === to ? 'page' : undefined}
      onClick={(e: MouseEvent) => {
        // A new tab or window keeps the browser's own handling.
        if (e.metaKey || e.ctrlKey || e.shiftKey || e.altKey || e.button !== 0) return;
        e.preventDefault();
        onGo(to);
      }}
    >
      {label}
    </a>
  );
  return (
    <nav aria-label="Billing pages" className="subnav">
      {link('dashboard', 'Balance and invoices')}
      {link('webhooks', 'Webhooks')}
    </nav>
  );
}

function Dashboard() {
  const [view, go] = useView();
  return (
    <>
      <BillingNav view={view} onGo={go} />
      {/* Webhooks load none of the dashboard's data. */}
      {view === 'webhooks' ? <Webhooks /> : <Overview />}
    </>
  );
}

function Overview() {
  const viewer = useBillingViewer();
  if (viewer === null) return <p>Loading…</p>;
  return (
    <>
      {viewer.operator && <OperatorOverview />}
      {(viewer.renter || !viewer.operator) && <RenterDashboard />}
    </>
  );
}

function RenterDashboard() {
  const loadRunway = useCallback(async () => (await request(BillingRunway)).runway, []);
  const loadInstances = useCallback(async () => request(BillingInstances), []);
  const loadInvoices = useCallback(async () => (await request(BillingInvoices)).invoices, []);
  const loadSeries = useCallback(async () => {
    const today = new Date();
    const end = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() + 1);
    const from = new Date(end - SERIES_DAYS * 86_400_000).toISOString();
    return (await request(BillingSpendSeries, { from, to: new Date(end).toISOString() })).usageSeries;
  }, []);
  const runway = usePolled(loadRunway, POLL_MS);
  const instances = usePolled(loadInstances, POLL_MS);
  const series = usePolled(loadSeries, 60_000);
  const invoices = usePolled(loadInvoices);

  return (
    <>
      <BalanceCard runway={runway.data} error={runway.error} />
      <TopUpCard />
      <BalanceHistory />
      <section aria-labelledby="billing-spend-title" className="card">
        <h2 id="billing-spend-title">Spend per day, last {SERIES_DAYS} days</h2>
        <ErrorBox error={series.error} />
        {series.data ? <SpendChart series={series.data} /> : !series.error && <p>Loading…</p>}
      </section>
      <InstancesCard data={instances.data} error={instances.error} />
      <ReservationsCards />
      <InvoicesCard invoices={invoices.data} error={invoices.error} />
    </>
  );
}

function BalanceCard({ runway, error }: { runway: BillingRunwayQuery['runway'] | null; error: unknown }) {
  return (
    <section aria-labelledby="billing-balance-title" className="card">
      <h2 id="billing-balance-title">Balance</h2>
      <ErrorBox error={error} />
      {runway === null ? (
        !error && <p>Loading…</p>
      ) : (
        <>
          {runway.low && (
            <div className="billing-warning" role="alert">
              Low balance: at the current burn it runs out
              {runway.runwaySeconds !== null && runway.runwaySeconds !== undefined
                ? ` in ${formatDuration(runway.runwaySeconds)}`
                : ''}
              ; running instances are stopped when it reaches zero. Top up soon.
            </div>
          )}
          <dl className="billing-stats">
            <div>
              <dt>Balance</dt>
              <dd className="billing-big" data-testid="billing-balance">
                {formatMoney(runway.balance, runway.currency)}
              </dd>
              <dd>
                <small>exact: {runway.balance} {runway.currency}</small>
              </dd>
            </div>
            <div>
              <dt>Burn rate</dt>
              <dd className="billing-big">{formatMoney(runway.burnRatePerHour, runway.currency)}/h</dd>
              <dd>
                <small>
                  {runway.runningInstances} running instance{runway.runningInstances === 1 ? '' : 's'}
                </small>
              </dd>
            </div>
            <div>
              <dt>Runway</dt>
              <dd className="billing-big" data-testid="billing-runway">
                {runway.runwaySeconds === null || runway.runwaySeconds === undefined
                  ? 'Nothing running'
                  : formatDuration(runway.runwaySeconds)}
              </dd>
              <dd>
                <small>warning below {formatDuration(runway.warnBelowSeconds)}</small>
              </dd>
            </div>
          </dl>
        </>
      )}
    </section>
  );
}

type InstanceRow = BillingInstancesQuery['instances'][number];
type Interval = BillingInstancesQuery['usage'][number];

/** The seconds of an interval up to `now` (whole seconds, as billed). */
function intervalSeconds(u: Interval, now: number): number {
  if (u.endedAtUtc) {
    if (u.billedSeconds !== null && u.billedSeconds !== undefined) return u.billedSeconds;
    return u.startedAtUtc ? Math.floor((Date.parse(u.endedAtUtc) - Date.parse(u.startedAtUtc)) / 1000) : 0;
  }
  return u.startedAtUtc ? Math.floor((now - Date.parse(u.startedAtUtc)) / 1000) : 0;
}

interface Cost {
  gpu: bigint;
  storage: bigint;
  gpuSeconds: number;
}

function costSoFar(intervals: Interval[], now: number): Cost {
  const c: Cost = { gpu: 0n, storage: 0n, gpuSeconds: 0 };
  for (const u of intervals) {
    // Time meters only: a bandwidth interval counts bytes, not seconds, and
    // the API gives no per-byte price on it (see the invoice lines instead).
    if (u.meterKind !== 'GPU' && u.meterKind !== 'STORAGE') continue;
    const s = intervalSeconds(u, now);
    const v = costOfSeconds(u.pricePerHour, s);
    if (u.meterKind === 'GPU') {
      c.gpu += v;
      c.gpuSeconds += s;
    } else c.storage += v;
  }
  return c;
}

/** The current time, ticking every second. */
function useNow(): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(t);
  }, []);
  return now;
}

function InstancesCard({ data, error }: { data: BillingInstancesQuery | null; error: unknown }) {
  const now = useNow();
  const byInstance = useMemo(() => {
    const m = new Map<string, Interval[]>();
    for (const u of data?.usage ?? []) m.set(u.instanceId, [...(m.get(u.instanceId) ?? []), u]);
    return m;
  }, [data]);
  const shown = (data?.instances ?? []).filter((i) => i.state !== 'DESTROYED');
  const running = shown.filter((i) => i.state === 'RUNNING');
  const others = shown.filter((i) => i.state !== 'RUNNING');
  return (
    <section aria-labelledby="billing-instances-title" className="card">
      <h2 id="billing-instances-title">Instances</h2>
      <ErrorBox error={error} />
      {data === null ? (
        !error && <p>Loading…</p>
      ) : shown.length === 0 ? (
        <p className="billing-empty">No instances: rent GPUs from the offers and they show here with their cost.</p>
      ) : (
        <>
          <p>
            <small>
              Cost so far, to the second, from the API's usage intervals and billed rates (GPU and storage apart);
              "Charged" is what the ledger has settled (the API's <code>costSoFar</code>, all meters), which trails the
              live figure by up to one settlement interval.
            </small>
          </p>
          {/* Focusable, so the table can be scrolled sideways from the keyboard. */}
          <div className="scroll" tabIndex={0} role="region" aria-label="Instances and their cost so far">
            <table className="billing-table">
              <thead>
                <tr>
                  <th scope="col">Instance</th>
                  <th scope="col">Status</th>
                  <th scope="col">Rate</th>
                  <th scope="col">GPU time</th>
                  <th scope="col">GPU cost</th>
                  <th scope="col">Storage cost</th>
                  <th scope="col">Total so far</th>
                  <th scope="col">Charged</th>
                </tr>
              </thead>
              <tbody>
                {[...running, ...others].map((i) => (
                  <InstanceLine key={i.id} instance={i} cost={costSoFar(byInstance.get(i.id) ?? [], now)} />
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}

function InstanceLine({ instance: i, cost }: { instance: InstanceRow; cost: Cost }) {
  const cur = i.currency;
  // Four extra decimals so a running instance visibly grows each second.
  const total = cost.gpu + cost.storage;
  return (
    <tr data-instance-id={i.id}>
      <th scope="row">
        {i.gpuCount}× {i.gpuModel}
        <br />
        <small>
          <code>{i.id.slice(0, 8)}</code> {wireName(i.rental).replace('_', '-')}
        </small>
      </th>
      <td>
        <span className={`badge billing-status-${wireName(i.state)}`}>{wireName(i.state)}</span>
        {i.statusReason && (
          <>
            <br />
            <small>{i.statusReason}</small>
          </>
        )}
      </td>
      <td>
        {formatMoney(i.pricePerHourTotal, cur)}/h
        <br />
        <small>storage {formatMoney(i.storagePricePerGbMonth, cur)}/GB-month</small>
      </td>
      <td>{formatDuration(cost.gpuSeconds)}</td>
      <td data-testid="billing-gpu-cost">{formatMoney(cost.gpu, cur, 4)}</td>
      <td data-testid="billing-storage-cost">{formatMoney(cost.storage, cur, 4)}</td>
      <td data-testid="billing-cost">
        <strong>{formatMoney(total, cur, 4)}</strong>
        <br />
        <small>{formatMoney(total, cur)}</small>
      </td>
      <td data-testid="billing-charged">
        {formatMoney(i.costSoFar, cur, 4)}
        <br />
        <small>{formatDuration(i.billedSeconds)} GPU billed</small>
      </td>
    </tr>
  );
}

function InvoicesCard({ invoices, error }: { invoices: BillingInvoicesQuery['invoices'] | null; error: unknown }) {
  const [open, setOpen] = useState<string | null>(null);
  return (
    <section aria-labelledby="billing-invoices-title" className="card">
      <h2 id="billing-invoices-title">Invoices</h2>
      <ErrorBox error={error} />
      {invoices === null ? (
        !error && <p>Loading…</p>
      ) : invoices.length === 0 ? (
        <p className="billing-empty">No invoices yet: usage is invoiced at the end of each period.</p>
      ) : (
        <ul className="billing-invoices">
          {invoices.map((inv) => {
            const expanded = open === inv.id;
            return (
              <li key={inv.id}>
                <button
                  type="button"
                  aria-expanded={expanded}
                  aria-controls={`billing-inv-${inv.id}`}
                  onClick={() => setOpen(expanded ? null : inv.id)}
                >
                  Invoice #{inv.number} · {inv.periodStartUtc.slice(0, 10)} to {inv.periodEndUtc.slice(0, 10)} ·{' '}
                  <span className={`badge billing-status-${wireName(inv.state)}`}>{wireName(inv.state)}</span> ·{' '}
                  <strong>{formatMoney(inv.total, inv.currency)}</strong>
                </button>
                {expanded && (
                  <div
                    id={`billing-inv-${inv.id}`}
                    className="scroll"
                    tabIndex={0}
                    role="region"
                    aria-label={`Lines of invoice #${inv.number}`}
                  >
                    <table className="billing-table">
                      <thead>
                        <tr>
                          <th scope="col">Instance</th>
                          <th scope="col">Meter</th>
                          <th scope="col">Quantity</th>
                          <th scope="col">Unit price</th>
                          <th scope="col">Amount</th>
                        </tr>
                      </thead>
                      <tbody>
                        {inv.lines.map((l, idx) => (
                          <tr key={idx}>
                            <td>
                              <code>{l.instanceId.slice(0, 8)}</code>
                              {l.earlierPeriod && <small> (earlier period)</small>}
                            </td>
                            <td>{meterName(l.meterKind)}</td>
                            <td>
                              {l.pricingQuantity} {l.pricingUnit}
                            </td>
                            <td>
                              {formatMoney(l.unitPrice, inv.currency)}/{l.pricingUnit}
                            </td>
                            <td title={`exact ${l.exactAmount}`}>{formatMoney(l.amount, inv.currency)}</td>
                          </tr>
                        ))}
                      </tbody>
                      <tfoot>
                        <tr>
                          <th scope="row" colSpan={4}>
                            Total (exact {inv.exactTotal}, rounding {inv.rounding})
                          </th>
                          <td>{formatMoney(inv.total, inv.currency)}</td>
                        </tr>
                      </tfoot>
                    </table>
                    <UsageExport invoiceId={inv.id} number={inv.number} />
                  </div>
                )}
              </li>
            );
          })}
        </ul>
      )}
    </section>
  );
}


/** The invoice's usage as FOCUS 1.0 CSV, from `invoiceUsageCsv`, saved as a file. */
function UsageExport({ invoiceId, number }: { invoiceId: string; number: number }) {
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const download = async () => {
    setBusy(true);
    setError(null);
    try {
      const csv = (await request(BillingUsageCsv, { invoiceId })).invoiceUsageCsv;
      const url = URL.createObjectURL(new Blob([csv], { type: 'text/csv' }));
      const a = document.createElement('a');
      a.href = url;
      a.download = `invoice-${number}-usage.csv`;
      document.body.appendChild(a);
      a.click();
      a.remove();
      window.setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="billing-export">
      <button type="button" onClick={() => void download()} disabled={busy}>
        Download usage CSV (FOCUS) for invoice #{number}
      </button>
      <ErrorBox error={error} />
    </div>
  );
}
