import { useCallback, useEffect, useRef, useState } from 'react';
import { request } from '../api';
import type { BillingBalanceHistoryQuery } from '../gql/graphql';
import { formatMoney, parseDecimal } from '../money';
import { ErrorBox } from '../ui';
import { BillingBalanceHistory } from './operations';
import { RunningBalanceChart, utcTime } from './RunningBalanceChart';
import './BalanceHistory.css';

type Page = BillingBalanceHistoryQuery['balanceHistory'];
export type BalanceEntry = Page['nodes'][number];

/** Entries per page (the API allows up to 200). */
export const HISTORY_PAGE = 20;
/** As often as the balance above, so the newest row matches it. */
const POLL_MS = 5000;

/** The entries loaded so far, newest first, and where the next page starts. */
interface Loaded {
  balance: string;
  currency: string;
  entries: BalanceEntry[];
  endCursor: string | null;
  hasNextPage: boolean;
}

function fromPage(page: Page): Loaded {
  return {
    balance: page.balance,
    currency: page.currency,
    entries: page.nodes,
    endCursor: page.pageInfo.endCursor ?? null,
    hasNextPage: page.pageInfo.hasNextPage,
  };
}

/**
 * A fresh first page in front of what was loaded. The cursors are opaque, so
 * the pages are joined where they overlap; with no overlap (more than a page
 * posted since) the older pages are dropped rather than shown with a gap.
 */
function withNewest(prev: Loaded | null, page: Page): Loaded {
  const fresh = fromPage(page);
  const oldest = page.nodes[page.nodes.length - 1];
  if (!prev || !oldest) return fresh;
  const i = prev.entries.findIndex((e) => e.cursor === oldest.cursor);
  const older = i === -1 ? [] : prev.entries.slice(i + 1);
  if (older.length === 0) return fresh;
  return { ...fresh, entries: [...page.nodes, ...older], endCursor: prev.endCursor, hasNextPage: prev.hasNextPage };
}

/** An older page after what was loaded, unless a refresh moved the end meanwhile. */
function withOlder(prev: Loaded | null, after: string, page: Page): Loaded | null {
  if (!prev || prev.endCursor !== after) return prev;
  const seen = new Set(prev.entries.map((e) => e.cursor));
  return {
    ...prev,
    entries: [...prev.entries, ...page.nodes.filter((n) => !seen.has(n.cursor))],
    endCursor: page.pageInfo.endCursor ?? null,
    hasNextPage: page.pageInfo.hasNextPage,
  };
}

/** The renter's balance entries (`balanceHistory`), newest first, with "load older" paging. */
export function BalanceHistory() {
  const [loaded, setLoaded] = useState<Loaded | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [olderError, setOlderError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const end = useRef<HTMLParagraphElement>(null);
  const [focusEnd, setFocusEnd] = useState(false);

  const refresh = useCallback(async () => {
    try {
      const page = (await request(BillingBalanceHistory, { first: HISTORY_PAGE })).balanceHistory;
      setLoaded((prev) => withNewest(prev, page));
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, []);
  useEffect(() => {
    void refresh();
    const timer = window.setInterval(() => void refresh(), POLL_MS);
    return () => window.clearInterval(timer);
  }, [refresh]);

  // The button goes once the oldest page is in; focus moves to what replaces it
  // rather than being lost to the page.
  useEffect(() => {
    if (focusEnd && end.current) {
      end.current.focus();
      setFocusEnd(false);
    }
  }, [focusEnd, loaded]);

  const loadOlder = async (hadFocus: boolean) => {
    const after = loaded?.endCursor;
    if (!after || busy) return;
    setBusy(true);
    setOlderError(null);
    try {
      const page = (await request(BillingBalanceHistory, { first: HISTORY_PAGE, after })).balanceHistory;
      setLoaded((prev) => withOlder(prev, after, page));
      if (!page.pageInfo.hasNextPage) setFocusEnd(hadFocus);
    } catch (e) {
      setOlderError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="billing-history-title" className="card">
      <h2 id="billing-history-title">Balance history</h2>
      <ErrorBox error={error} />
      {loaded === null ? (
        !error && <p>Loading…</p>
      ) : loaded.entries.length === 0 ? (
        <p className="billing-empty">
          No entries yet: credit, top-ups and usage charges show here, newest first, as they are posted.
        </p>
      ) : (
        <>
          <RunningBalanceChart entries={loaded.entries} currency={loaded.currency} />
          <HistoryTable entries={loaded.entries} currency={loaded.currency} />
          <div className="billing-export">
            {loaded.hasNextPage ? (
              // Not disabled while loading: a disabled button would drop the focus.
              <button
                type="button"
                aria-busy={busy || undefined}
                onClick={(e) => void loadOlder(document.activeElement === e.currentTarget)}
              >
                {busy ? 'Loading older entries…' : 'Load older entries'}
              </button>
            ) : (
              <p data-testid="billing-history-end" ref={end} tabIndex={-1}>
                <small>
                  That is the whole history: {loaded.entries.length} entr{loaded.entries.length === 1 ? 'y' : 'ies'}.
                </small>
              </p>
            )}
            <ErrorBox error={olderError} />
          </div>
        </>
      )}
    </section>
  );
}

/** A signed amount: a charge with a minus sign, a credit with a plus. */
export function signedMoney(amount: string, currency: string): string {
  const n = parseDecimal(amount);
  if (n < 0n) return `\u2212${formatMoney(-n, currency)}`;
  return `${n > 0n ? '+' : ''}${formatMoney(n, currency)}`;
}

function HistoryTable({ entries, currency }: { entries: BalanceEntry[]; currency: string }) {
  return (
    // Focusable, so the table can be scrolled sideways from the keyboard.
    <div className="scroll" tabIndex={0} role="region" aria-label="Balance entries, newest first">
      <table className="billing-table billing-history-table" data-testid="billing-history">
        <caption className="billing-sr">
          Balance entries, newest first ({currency}; the exact amount under each rounded one)
        </caption>
        <thead>
          <tr>
            <th scope="col">Time (UTC)</th>
            <th scope="col">Amount</th>
            <th scope="col">Running balance</th>
            <th scope="col">Kind</th>
          </tr>
        </thead>
        <tbody>
          {entries.map((e) => (
            <tr key={e.cursor} data-cursor={e.cursor}>
              <th scope="row">
                <time dateTime={e.postedAtUtc}>{utcTime(e.postedAtUtc)}</time>
              </th>
              <td>
                {signedMoney(e.amount, currency)}
                <br />
                <small data-testid="billing-history-amount">{e.amount}</small>
              </td>
              <td>
                {formatMoney(e.balanceAfter, currency)}
                <br />
                <small data-testid="billing-history-balance">{e.balanceAfter}</small>
              </td>
              <td data-testid="billing-history-kind">
                <strong>{e.kind.replace(/_/g, ' ')}</strong>
                <br />
                <small>
                  {e.description}
                  {e.instanceId && (
                    <>
                      {' '}
                      <code>{e.instanceId.slice(0, 8)}</code>
                    </>
                  )}
                </small>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
