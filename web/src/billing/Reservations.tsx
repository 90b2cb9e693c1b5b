import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import { ApiError, request, wireName } from '../api';
import type {
  BillingReservationsQuery,
  RenterReservationFieldsFragment,
  ResaleListingFieldsFragment,
} from '../gql/graphql';
import { HOUR_MS, fromUtcInput, nextHour, shortId, toUtcInput, utcRange } from '../hours';
import { formatMoney, parseDecimal, percent } from '../money';
import { ErrorBox, Field, fieldProps, newKey } from '../ui';
import {
  BillingReservations,
  BuyReservationHours,
  ListReservationHours,
  WithdrawListing,
} from './reservation-operations';

/** How often reservations, escrow and listings are refreshed. */
const POLL_MS = 15_000;

/** Reservations whose future hours may be listed: paid, not over. */
const LISTABLE = new Set(['BOOKED', 'ACTIVE']);

/**
 * The renter's reserved capacity on the billing page: its reservations with
 * their escrow (released to the host, refunded), a form to list future hours
 * of one for resale, its listings (withdraw an open one), and the market's
 * open listings with a Buy button. One query, refreshed every 15 s and after
 * each change.
 */
export function ReservationsCards() {
  const [data, setData] = useState<BillingReservationsQuery | null>(null);
  const [error, setError] = useState<unknown>(null);
  const load = useCallback(async () => {
    try {
      setData(await request(BillingReservations, { from: new Date().toISOString() }));
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, []);
  useEffect(() => {
    void load();
    const timer = window.setInterval(() => void load(), POLL_MS);
    return () => window.clearInterval(timer);
  }, [load]);

  const mine = new Set((data?.myListings ?? []).map((l) => l.id));
  return (
    <>
      <section aria-labelledby="billing-reservations-title" className="card billing-reservations">
        <h2 id="billing-reservations-title">Reservations</h2>
        <ErrorBox error={error} />
        {data === null ? (
          !error && <p>Loading…</p>
        ) : (
          <>
            <p>
              <small>
                A reserved block is paid up front into escrow and released to the host as it runs; hours the host is
                not heard from come back to you, and a host that cancels refunds the rest and pays you{' '}
                {percent(Number(data.reservationTerms.cancellationPenaltyRate))} of it. Times are UTC.
              </small>
            </p>
            <ReservationTable reservations={data.reservations} />
            <ListHoursForm
              reservations={data.reservations}
              resaleFeeRate={data.reservationTerms.resaleFeeRate}
              onListed={() => void load()}
            />
            <MyListings listings={data.myListings} onChanged={() => void load()} />
          </>
        )}
      </section>
      <section aria-labelledby="billing-resale-title" className="card billing-reservations">
        <h2 id="billing-resale-title">Reserved hours for sale</h2>
        {data === null ? (
          !error && <p>Loading…</p>
        ) : (
          <MarketListings listings={data.resaleListings} mine={mine} onBought={() => void load()} />
        )}
      </section>
    </>
  );
}

function ReservationTable({ reservations }: { reservations: RenterReservationFieldsFragment[] }) {
  if (reservations.length === 0) {
    return (
      <p className="billing-empty">
        No reservations: book a future block of an offer's GPUs with <code>reserve</code>, or buy hours below.
      </p>
    );
  }
  return (
    <div className="scroll" tabIndex={0} role="region" aria-label="Your reservations">
      <table className="billing-table">
        <thead>
          <tr>
            <th scope="col">Machine</th>
            <th scope="col">GPUs</th>
            <th scope="col">Block</th>
            <th scope="col">Hours left</th>
            <th scope="col">Amount</th>
            <th scope="col">Escrow</th>
            <th scope="col">State</th>
          </tr>
        </thead>
        <tbody>
          {reservations.map((r) => (
            <tr key={r.id} data-reservation-id={r.id} data-state={r.state}>
              <th scope="row">
                {r.gpuModel}
                <br />
                <small>
                  machine <code title={r.machineId}>{shortId(r.machineId)}</code>
                  {r.parentId ? ' · bought on resale' : ''}
                </small>
              </th>
              <td>
                {r.gpuCount}
                {r.gpuIndices.length > 0 && (
                  <>
                    <br />
                    <small>GPU {r.gpuIndices.join(', ')}</small>
                  </>
                )}
              </td>
              <td>
                {utcRange(r.startsAt, r.endsAt)}
                {r.sold.length > 0 && (
                  <>
                    <br />
                    <small>sold: {r.sold.map((s) => utcRange(s.startsAt, s.endsAt)).join('; ')}</small>
                  </>
                )}
              </td>
              <td data-testid="reservation-hours-left">
                {r.hoursLeft} of {r.hours}
              </td>
              <td>
                <data value={r.amount}>{formatMoney(r.amount, r.currency)}</data>
                <br />
                <small>{formatMoney(r.pricePerGpuHour, r.currency)}/GPU-hour</small>
              </td>
              <td data-testid="reservation-escrow">
                {r.escrow ? (
                  <>
                    released {formatMoney(r.escrow.released, r.currency)}
                    <br />
                    <small>
                      refunded {formatMoney(r.escrow.refunded, r.currency)}
                      {parseDecimal(r.escrow.penalty) > 0n ? ` + penalty ${formatMoney(r.escrow.penalty, r.currency)}` : ''}
                      {' · '}held {formatMoney(r.escrow.remaining, r.currency)}
                    </small>
                  </>
                ) : (
                  <small>{r.parentId ? "in the seller's escrow" : '—'}</small>
                )}
              </td>
              <td>
                <span className={`badge billing-status-${wireName(r.state)}`}>{wireName(r.state)}</span>
                {r.reason && (
                  <>
                    <br />
                    <small>{r.reason}</small>
                  </>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** The first hour of `r` that may still be listed: not begun, within the block. */
function firstListableHour(r: RenterReservationFieldsFragment): number {
  return Math.max(Date.parse(r.startsAt), nextHour(Date.now()));
}

function ListHoursForm({
  reservations,
  resaleFeeRate,
  onListed,
}: {
  reservations: RenterReservationFieldsFragment[];
  resaleFeeRate: string;
  onListed: () => void;
}) {
  const listable = reservations.filter((r) => LISTABLE.has(r.state) && r.hoursLeft > 0);
  const [reservationId, setReservationId] = useState(listable[0]?.id ?? '');
  const chosen = listable.find((r) => r.id === reservationId) ?? listable[0];
  const defaults = (r: RenterReservationFieldsFragment | undefined) => {
    if (!r) return { starts: '', ends: '' };
    const starts = firstListableHour(r);
    return { starts: toUtcInput(starts), ends: toUtcInput(Math.min(starts + HOUR_MS, Date.parse(r.endsAt))) };
  };
  const [starts, setStarts] = useState(() => defaults(chosen).starts);
  const [ends, setEnds] = useState(() => defaults(chosen).ends);
  const [price, setPrice] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState<string | null>(null);

  // The first listable reservation once the list arrives or changes.
  useEffect(() => {
    if (!chosen || chosen.id === reservationId) return;
    setReservationId(chosen.id);
    const d = defaults(chosen);
    setStarts(d.starts);
    setEnds(d.ends);
  }, [chosen, reservationId]);

  if (listable.length === 0) {
    return (
      <div className="billing-form">
        <h3>List hours for resale</h3>
        <p className="billing-empty">No reservation has hours that have not started.</p>
      </div>
    );
  }

  const startsAt = fromUtcInput(starts);
  const endsAt = fromUtcInput(ends);
  const hours = startsAt && endsAt ? Math.max(0, (Date.parse(endsAt) - Date.parse(startsAt)) / HOUR_MS) : 0;
  let preview: string | null = null;
  if (chosen && Number.isInteger(hours) && hours > 0 && /^\d+(\.\d{1,9})?$/.test(price.trim())) {
    const amount = parseDecimal(price.trim()) * BigInt(chosen.gpuCount * hours);
    const fee = (amount * parseDecimal(resaleFeeRate)) / 10n ** 12n;
    preview = `A buyer pays ${formatMoney(amount, chosen.currency)}; you get ${formatMoney(amount - fee, chosen.currency)} after the ${percent(Number(resaleFeeRate))} resale fee.`;
  }

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    setDone(null);
    try {
      if (!startsAt) throw new ApiError([{ message: 'startsAt: a date and time (UTC)', code: 'VALIDATION', field: 'startsAt' }]);
      if (!endsAt) throw new ApiError([{ message: 'endsAt: a date and time (UTC)', code: 'VALIDATION', field: 'endsAt' }]);
      const listing = (
        await request(ListReservationHours, {
          input: { reservationId, startsAt, endsAt, pricePerGpuHour: price.trim() },
        })
      ).listReservationHours;
      setDone(
        `Listed ${listing.hours} h (${utcRange(listing.startsAt, listing.endsAt)}) for ${formatMoney(listing.amount, listing.currency)}.`,
      );
      onListed();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form className="billing-form" onSubmit={(e) => void submit(e)} noValidate aria-labelledby="billing-list-hours-title">
      <h3 id="billing-list-hours-title">List hours for resale</h3>
      <p>
        <small>
          Whole UTC hours of a reservation that have not started, all its GPUs. A buyer gets them on the same GPUs; the
          listing expires unsold when its first hour starts.
        </small>
      </p>
      <div className="row">
        <Field id="resale-reservation" label="Reservation" error={error} field="reservationId">
          <select
            {...fieldProps('resale-reservation', error, 'reservationId')}
            value={reservationId}
            onChange={(e) => {
              setReservationId(e.target.value);
              const d = defaults(listable.find((r) => r.id === e.target.value));
              setStarts(d.starts);
              setEnds(d.ends);
            }}
          >
            {listable.map((r) => (
              <option key={r.id} value={r.id}>
                {r.gpuCount}× {r.gpuModel}, {utcRange(r.startsAt, r.endsAt)} ({shortId(r.id)})
              </option>
            ))}
          </select>
        </Field>
        <Field id="resale-starts" label="From (UTC)" error={error} field="startsAt">
          <input
            {...fieldProps('resale-starts', error, 'startsAt')}
            type="datetime-local"
            step={3600}
            value={starts}
            onChange={(e) => setStarts(e.target.value)}
          />
        </Field>
        <Field id="resale-ends" label="Until (UTC)" error={error} field="endsAt">
          <input
            {...fieldProps('resale-ends', error, 'endsAt')}
            type="datetime-local"
            step={3600}
            value={ends}
            onChange={(e) => setEnds(e.target.value)}
          />
        </Field>
        <Field
          id="resale-price"
          label={`Price per GPU-hour (${chosen?.currency ?? 'USD'})`}
          error={error}
          field="pricePerGpuHour"
        >
          <input
            {...fieldProps('resale-price', error, 'pricePerGpuHour')}
            inputMode="decimal"
            placeholder="2.00"
            value={price}
            onChange={(e) => setPrice(e.target.value)}
          />
        </Field>
        <button type="submit" className="primary" disabled={busy}>
          List hours
        </button>
      </div>
      {preview && <p className="billing-muted">{preview}</p>}
      <ErrorBox error={error} except={['reservationId', 'startsAt', 'endsAt', 'pricePerGpuHour']} />
      <p role="status" className="billing-muted">
        {done ?? ''}
      </p>
    </form>
  );
}

function MyListings({ listings, onChanged }: { listings: ResaleListingFieldsFragment[]; onChanged: () => void }) {
  return (
    <>
      <h3>Your listings</h3>
      {listings.length === 0 ? (
        <p className="billing-empty">No listings.</p>
      ) : (
        <div className="scroll" tabIndex={0} role="region" aria-label="Your listings">
          <table className="billing-table">
            <thead>
              <tr>
                <th scope="col">Hours</th>
                <th scope="col">GPUs</th>
                <th scope="col">Price</th>
                <th scope="col">Amount</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span className="billing-sr">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {listings.map((l) => (
                <MyListingRow key={l.id} listing={l} onChanged={onChanged} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function MyListingRow({ listing: l, onChanged }: { listing: ResaleListingFieldsFragment; onChanged: () => void }) {
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const withdraw = async () => {
    setBusy(true);
    setError(null);
    try {
      await request(WithdrawListing, { id: l.id });
      onChanged();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <tr data-listing-id={l.id} data-state={l.state}>
      <th scope="row">
        {utcRange(l.startsAt, l.endsAt)}
        <br />
        <small>
          {l.hours} h of reservation <code title={l.reservationId}>{shortId(l.reservationId)}</code>
        </small>
      </th>
      <td>
        {l.gpuCount}× {l.gpuModel}
      </td>
      <td>{formatMoney(l.pricePerGpuHour, l.currency)}/GPU-hour</td>
      <td>
        <data value={l.amount}>{formatMoney(l.amount, l.currency)}</data>
      </td>
      <td>
        <span className={`badge billing-status-${wireName(l.state)}`}>{wireName(l.state)}</span>
      </td>
      <td>
        {l.state === 'OPEN' && (
          <button type="button" disabled={busy} onClick={() => void withdraw()}>
            Withdraw<span className="billing-sr"> the listing of {utcRange(l.startsAt, l.endsAt)}</span>
          </button>
        )}
        <ErrorBox error={error} />
      </td>
    </tr>
  );
}

function MarketListings({
  listings,
  mine,
  onBought,
}: {
  listings: ResaleListingFieldsFragment[];
  mine: Set<string>;
  onBought: () => void;
}) {
  const open = listings.filter((l) => l.state === 'OPEN');
  if (open.length === 0) {
    return <p className="billing-empty">No reserved hours for sale right now.</p>;
  }
  return (
    <>
      <p>
        <small>
          Hours other renters reserved and sell, on the same GPUs they booked. Buying pays the amount from your
          balance at once; the hours become your reservation.
        </small>
      </p>
      <div className="scroll" tabIndex={0} role="region" aria-label="Open listings">
        <table className="billing-table">
          <thead>
            <tr>
              <th scope="col">Hours</th>
              <th scope="col">GPUs</th>
              <th scope="col">Price</th>
              <th scope="col">Amount</th>
              <th scope="col">
                <span className="billing-sr">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {open.map((l) => (
              <MarketRow key={l.id} listing={l} own={mine.has(l.id)} onBought={onBought} />
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function MarketRow({
  listing: l,
  own,
  onBought,
}: {
  listing: ResaleListingFieldsFragment;
  own: boolean;
  onBought: () => void;
}) {
  // One key per listing while the page is open: a retried click buys once.
  const key = useRef(`buy-${l.id}-${newKey()}`);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState<string | null>(null);
  const buy = async () => {
    setBusy(true);
    setError(null);
    try {
      const r = (await request(BuyReservationHours, { input: { listingId: l.id, idempotencyKey: key.current } }))
        .buyReservationHours;
      setDone(`Bought: reservation ${shortId(r.id)}, ${wireName(r.state)}.`);
      onBought();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <tr data-listing-id={l.id}>
      <th scope="row">
        {utcRange(l.startsAt, l.endsAt)}
        <br />
        <small>{l.hours} h</small>
      </th>
      <td>
        {l.gpuCount}× {l.gpuModel}
        <br />
        <small>
          machine <code title={l.machineId}>{shortId(l.machineId)}</code>
        </small>
      </td>
      <td>{formatMoney(l.pricePerGpuHour, l.currency)}/GPU-hour</td>
      <td>
        <data value={l.amount}>{formatMoney(l.amount, l.currency)}</data>
      </td>
      <td>
        {own ? (
          <small>your listing</small>
        ) : (
          <button type="button" className="primary" disabled={busy || done !== null} onClick={() => void buy()}>
            Buy for {formatMoney(l.amount, l.currency)}
            <span className="billing-sr">: {utcRange(l.startsAt, l.endsAt)}</span>
          </button>
        )}
        <span role="status" className="billing-muted">
          {done ?? ''}
        </span>
        <ErrorBox error={error} />
      </td>
    </tr>
  );
}
