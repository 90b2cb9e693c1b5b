// The operators' view of the billing dashboard (docs/dashboards.md,
// "Operator overview"): marketplace volume and platform fees per day, GPUs
// rented versus listed, and the tenants near a quota or out of credit. It
// asks `me { operator }` first and shows nothing to anyone else; the API
// refuses `marketplaceOverview` to non-operators in any case.
import { useCallback, useEffect, useState } from 'react';
import { request } from '../api';
import type { OperatorMarketplaceQuery } from '../gql/graphql';
import { formatDuration, formatMoney } from '../money';
import { ErrorBox } from '../ui';
import { OperatorMarketplace, OperatorViewer } from './operator-operations';
import { SupplyChart, VolumeChart } from './OperatorCharts';

type Overview = OperatorMarketplaceQuery['marketplaceOverview'];

const WINDOWS = [7, 30, 90] as const;
const NEAR_QUOTA_PERCENT = 80;
const POLL_MS = 30_000;
const DAY_MS = 86_400_000;

/** `[from, to)` of the last `days` UTC days, today included. */
function lastDays(days: number): { from: string; to: string } {
  const now = new Date();
  const end = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return { from: new Date(end - days * DAY_MS).toISOString(), to: new Date(end).toISOString() };
}

/**
 * Who is looking: operators get the marketplace overview, renters their own
 * billing. An operator of the platform tenant has no renter billing to show.
 */
export function useBillingViewer(): { operator: boolean; renter: boolean } | null {
  const [viewer, setViewer] = useState<{ operator: boolean; renter: boolean } | null>(null);
  useEffect(() => {
    let live = true;
    request(OperatorViewer)
      .then((r) => live && setViewer({ operator: r.me.operator, renter: r.me.tenantRoles.includes('RENTER') }))
      // Not knowing means the renter view: its sections report the failure.
      .catch(() => live && setViewer({ operator: false, renter: true }));
    return () => {
      live = false;
    };
  }, []);
  return viewer;
}

export function OperatorOverview() {
  const [days, setDays] = useState<number>(30);
  const [data, setData] = useState<Overview | null>(null);
  const [error, setError] = useState<unknown>(null);
  const load = useCallback(async () => {
    try {
      const { from, to } = lastDays(days);
      setData((await request(OperatorMarketplace, { from, to, nearQuotaPercent: NEAR_QUOTA_PERCENT })).marketplaceOverview);
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, [days]);
  useEffect(() => {
    setData(null);
    void load();
    const timer = window.setInterval(() => void load(), POLL_MS);
    return () => window.clearInterval(timer);
  }, [load]);

  return (
    <section aria-labelledby="op-title" className="card" data-testid="operator-overview">
      <h2 id="op-title">Marketplace (operators)</h2>
      <p>
        <label htmlFor="op-window">Window </label>
        <select id="op-window" value={days} onChange={(e) => setDays(Number(e.target.value))}>
          {WINDOWS.map((d) => (
            <option key={d} value={d}>
              last {d} days
            </option>
          ))}
        </select>{' '}
        <small>UTC days; amounts are the ledger's, rounded half-even for display (exact on hover).</small>
      </p>
      <ErrorBox error={error} />
      {data === null ? (
        !error && <p aria-live="polite">Loading…</p>
      ) : (
        <>
          <VolumeTotals overview={data} days={days} />
          <h3>Volume and fees per day</h3>
          <VolumeChart volume={data.volume} from={data.from} to={data.to} />
          <h3>GPUs rented versus listed, now</h3>
          <SupplyChart supply={data.gpuSupply} />
          <NearQuota overview={data} />
          <OutOfCredit overview={data} />
        </>
      )}
    </section>
  );
}

function VolumeTotals({ overview, days }: { overview: Overview; days: number }) {
  const v = overview.volume;
  const cur = v.currency;
  return (
    <dl className="billing-stats">
      <div>
        <dt>Volume, last {days} days</dt>
        <dd className="billing-big" data-testid="op-total-volume" data-exact={v.totalVolume}>
          {formatMoney(v.totalVolume, cur)}
        </dd>
        <dd>
          <small>
            exact: {v.totalVolume} {cur}; {v.totalPostings} usage posting{v.totalPostings === 1 ? '' : 's'}
          </small>
        </dd>
      </div>
      <div>
        <dt>Platform fees</dt>
        <dd className="billing-big" data-testid="op-total-fees" data-exact={v.totalFees}>
          {formatMoney(v.totalFees, cur)}
        </dd>
        <dd>
          <small>
            exact: {v.totalFees} {cur}
          </small>
        </dd>
      </div>
      <div>
        <dt>Fee account, after credit notes</dt>
        <dd className="billing-big" data-testid="op-total-fee-revenue" data-exact={v.totalFeeRevenue}>
          {formatMoney(v.totalFeeRevenue, cur)}
        </dd>
        <dd>
          <small>adjustments {formatMoney(v.totalFeeAdjustments, cur)}</small>
        </dd>
      </div>
      <div>
        <dt>Hosts' share</dt>
        <dd className="billing-big" data-testid="op-total-host" data-exact={v.totalHostEarnings}>
          {formatMoney(v.totalHostEarnings, cur)}
        </dd>
      </div>
    </dl>
  );
}

function tenantLabel(t: { tenantId: string; tenantName: string }) {
  return (
    <>
      {t.tenantName || 'unnamed tenant'}
      <br />
      <small>
        <code>{t.tenantId.slice(0, 8)}</code>
      </small>
    </>
  );
}

function quotaName(quota: string): string {
  if (quota.startsWith('max_gpus_per_model:')) return `GPUs of ${quota.slice('max_gpus_per_model:'.length)}`;
  return (
    { max_gpus: 'GPUs', max_running_instances: 'running instances', monthly_budget: 'monthly budget' }[quota] ?? quota
  );
}

function NearQuota({ overview }: { overview: Overview }) {
  const near = overview.nearQuota;
  return (
    <>
      <h3 id="op-near-title">Tenants at or above {near.thresholdPercent} % of a quota</h3>
      {near.tenants.length === 0 ? (
        <p className="billing-empty">No tenant is near a quota.</p>
      ) : (
        <div className="scroll" tabIndex={0} role="region" aria-labelledby="op-near-title">
          <table className="billing-table">
            <thead>
              <tr>
                <th scope="col">Tenant</th>
                <th scope="col">Quota</th>
                <th scope="col">Used of limit</th>
                <th scope="col">Share</th>
              </tr>
            </thead>
            <tbody>
              {near.tenants.flatMap((t) =>
                t.dimensions.map((d, i) => {
                  const money = d.quota === 'monthly_budget';
                  const amount = (x: string) => (money ? formatMoney(x, near.currency) : x);
                  return (
                    <tr key={`${t.tenantId}|${d.quota}`} data-testid="op-near-quota" data-tenant-id={t.tenantId} data-quota={d.quota}>
                      {i === 0 ? (
                        <th scope="row" rowSpan={t.dimensions.length}>
                          {tenantLabel(t)}
                        </th>
                      ) : null}
                      <td>{quotaName(d.quota)}</td>
                      <td data-testid="op-near-used">
                        {amount(d.used)} of {amount(d.limit)}
                      </td>
                      <td data-testid="op-near-percent">
                        <strong>{d.percent} %</strong>
                      </td>
                    </tr>
                  );
                }),
              )}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function OutOfCredit({ overview }: { overview: Overview }) {
  const c = overview.outOfCredit;
  return (
    <>
      <h3 id="op-credit-title">Tenants out of credit or with less than {formatDuration(c.warnBelowSeconds)} of runway</h3>
      {c.tenants.length === 0 ? (
        <p className="billing-empty">Every renter has credit.</p>
      ) : (
        <div className="scroll" tabIndex={0} role="region" aria-labelledby="op-credit-title">
          <table className="billing-table">
            <thead>
              <tr>
                <th scope="col">Tenant</th>
                <th scope="col">Why</th>
                <th scope="col">Balance</th>
                <th scope="col">Runway</th>
                <th scope="col">Last charged</th>
              </tr>
            </thead>
            <tbody>
              {c.tenants.map((t) => (
                <tr key={t.tenantId} data-testid="op-out-of-credit" data-tenant-id={t.tenantId}>
                  <th scope="row">{tenantLabel(t)}</th>
                  <td>
                    {t.reasons.map((r) => (
                      <span key={r} className="badge">
                        {r === 'BALANCE_EXHAUSTED' ? 'no credit' : 'low runway'}
                      </span>
                    ))}
                  </td>
                  <td data-testid="op-credit-balance" data-exact={t.balance} title={`exact ${t.balance}`}>
                    {formatMoney(t.balance, c.currency)}
                  </td>
                  <td>
                    {t.runwaySeconds === null || t.runwaySeconds === undefined
                      ? '–'
                      : `${formatDuration(t.runwaySeconds)} at ${formatMoney(t.burnPerHour ?? '0', c.currency)}/h`}
                  </td>
                  <td>{t.lastChargedAtUtc ? t.lastChargedAtUtc.slice(0, 19).replace('T', ' ') : 'never'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
