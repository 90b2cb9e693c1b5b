import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import { ApiError, request } from '../api';
import type {
  HostMachineReservationsQuery,
  HostReservationFieldsFragment,
  MachineFieldsFragment,
} from '../gql/graphql';
import { HOUR_MS, hourStart, shortId, utcRange } from '../hours';
import { formatMoney, parseDecimal, percent } from '../money';
import { CancelReservation, HostMachineReservations, SetReservedTerms } from './reservation-operations';
import { ErrorBox, Field, fieldProps } from '../ui';

type Calendar = HostMachineReservationsQuery['machineCalendar'];
type Terms = NonNullable<Calendar['terms']>;

/** How far ahead the calendar shows. */
const CALENDAR_DAYS = 7;

const DAY_MS = 24 * HOUR_MS;

/** Blocks a host may still cancel: booked, or running. */
const CANCELLABLE = new Set(['PENDING', 'BOOKED', 'ACTIVE']);

function stateText(state: string): string {
  return state.toLowerCase();
}

/** A whole number typed into `field`, or a VALIDATION error at that field. */
function wholeNumber(field: string, text: string): number {
  if (!/^\s*\d{1,9}\s*$/.test(text)) {
    throw new ApiError([{ message: `${field}: a whole number`, code: 'VALIDATION', field }]);
  }
  return Number.parseInt(text, 10);
}

/**
 * A machine's reserved capacity as its host runs it: the terms renters book
 * blocks on (set, changed or withdrawn with `setReservedTerms`), what is still
 * to come from escrow, the next 7 days hour by hour (free GPUs, and which are
 * booked), and the blocks booked on the machine with a cancellation (and its
 * penalty) each. Loaded when shown, again after a change or on "Refresh".
 */
export function MachineReservations({ machine: m }: { machine: MachineFieldsFragment }) {
  // The window is fixed while the section is open: the current UTC hour on.
  const [window_] = useState(() => {
    const from = hourStart(Date.now());
    return {
      from: new Date(from).toISOString(),
      to: new Date(from + CALENDAR_DAYS * 24 * HOUR_MS).toISOString(),
    };
  });
  const [data, setData] = useState<HostMachineReservationsQuery | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [loading, setLoading] = useState(false);

  const load = useCallback(async () => {
    setLoading(true);
    try {
      setData(await request(HostMachineReservations, { machineId: m.id, from: window_.from, to: window_.to }));
      setLoadError(null);
    } catch (e) {
      setLoadError(e);
    } finally {
      setLoading(false);
    }
  }, [m.id, window_]);

  useEffect(() => {
    void load();
  }, [load]);

  const [termsNotice, setTermsNotice] = useState<string | null>(null);
  const titleId = `reservations-${m.id}-title`;
  const toCome = data?.myMachines.find((x) => x.id === m.id)?.reservedEarningsToCome;
  return (
    <section className="reservations" aria-labelledby={titleId} data-testid="machine-reservations">
      <h4 id={titleId} className="visually-hidden">
        Reservations of {m.name}
      </h4>
      <ErrorBox error={loadError} />
      {data === null ? (
        !loadError && <p className="muted">Loading…</p>
      ) : (
        <>
          <dl className="figures">
            <div>
              <dt>Reserved earnings to come</dt>
              <dd data-testid="reserved-earnings">
                {toCome ? (
                  <data value={toCome.amount}>{formatMoney(toCome.amount, toCome.currency)}</data>
                ) : (
                  '—'
                )}
              </dd>
            </div>
            {toCome && (
              <div>
                <dt>Blocks still paying</dt>
                <dd>{toCome.blocks}</dd>
              </div>
            )}
          </dl>
          <p className="muted">
            Your share after the platform fee
            {data.reservationTerms ? ` (${percent(Number(data.reservationTerms.feeRate))})` : ''} of what renters
            have paid into escrow for blocks on this machine and is not yet released; hours the machine is not heard
            from are refunded to the renter instead.
          </p>
          <TermsForm
            // A new form once the terms change, so its inputs start from them.
            key={JSON.stringify(data.machineCalendar.terms)}
            machine={m}
            terms={data.machineCalendar.terms ?? null}
            onChanged={() => void load()}
            onNotice={setTermsNotice}
          />
          {/* Outside the form, which the saved terms replace: the notice
              stays after the reload that follows a save. */}
          <p role="status" className="muted">
            {termsNotice ?? ''}
          </p>
          <CalendarTable machine={m} calendar={data.machineCalendar} />
          <BlockList
            machine={m}
            reservations={data.machineReservations}
            penaltyRate={data.reservationTerms.cancellationPenaltyRate}
            onChanged={() => void load()}
          />
        </>
      )}
      <button type="button" className="link" onClick={() => void load()} disabled={loading}>
        Refresh reservations
      </button>
    </section>
  );
}

function TermsForm({
  machine: m,
  terms,
  onChanged,
  onNotice,
}: {
  machine: MachineFieldsFragment;
  terms: Terms | null;
  onChanged: () => void;
  /** What the last save did, shown by the parent (this form is replaced
   * when the terms change). */
  onNotice: (notice: string | null) => void;
}) {
  const [price, setPrice] = useState(terms?.pricePerGpuHour ?? m.pricePerGpuHour ?? '');
  const [lead, setLead] = useState(String(terms?.maxLeadDays ?? 30));
  const [shortest, setShortest] = useState(String(terms?.minBlockHours ?? 1));
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const ids = {
    price: `rsv-price-${m.id}`,
    lead: `rsv-lead-${m.id}`,
    shortest: `rsv-shortest-${m.id}`,
  };

  const save = async (withdraw: boolean) => {
    setBusy(true);
    setError(null);
    onNotice(null);
    try {
      // The API checks the bounds; only whole numbers can be sent at all.
      const terms = withdraw
        ? null
        : {
            pricePerGpuHour: price.trim(),
            maxLeadDays: wholeNumber('maxLeadDays', lead),
            minBlockHours: wholeNumber('minBlockHours', shortest),
          };
      await request(SetReservedTerms, { machineId: m.id, terms });
      onNotice(withdraw ? 'Reserved terms withdrawn: no new bookings; booked blocks stay.' : 'Reserved terms saved.');
      onChanged();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const submit = (event: FormEvent) => {
    event.preventDefault();
    void save(false);
  };

  return (
    <>
      <h5 className="label">Terms for reserved blocks</h5>
      <p className="muted">
        {terms
          ? `Renters can book blocks of at least ${terms.minBlockHours} h, ending within ${terms.maxLeadDays} days, at ${terms.pricePerGpuHour} ${terms.currency} per GPU-hour, paid up front.`
          : 'This machine takes no reservations: set terms to let renters book future blocks of whole hours, paid up front.'}
      </p>
      <form className="row" onSubmit={submit} noValidate aria-label={`Reserved terms of ${m.name}`}>
        <Field id={ids.price} label={`Reserved price per GPU-hour (${m.currency})`} error={error} field="pricePerGpuHour">
          <input
            {...fieldProps(ids.price, error, 'pricePerGpuHour')}
            inputMode="decimal"
            placeholder="2.00"
            value={price}
            onChange={(e) => setPrice(e.target.value)}
          />
        </Field>
        <Field id={ids.lead} label="Bookable days ahead" error={error} field="maxLeadDays">
          <input
            {...fieldProps(ids.lead, error, 'maxLeadDays')}
            className="short"
            inputMode="numeric"
            value={lead}
            onChange={(e) => setLead(e.target.value)}
          />
        </Field>
        <Field id={ids.shortest} label="Shortest block (hours)" error={error} field="minBlockHours">
          <input
            {...fieldProps(ids.shortest, error, 'minBlockHours')}
            className="short"
            inputMode="numeric"
            value={shortest}
            onChange={(e) => setShortest(e.target.value)}
          />
        </Field>
        <button type="submit" className="primary" disabled={busy}>
          Save reserved terms
        </button>
        {terms && (
          <button type="button" disabled={busy} onClick={() => void save(true)}>
            Withdraw reserved terms
          </button>
        )}
      </form>
      <ErrorBox error={error} except={['pricePerGpuHour', 'maxLeadDays', 'minBlockHours']} />
    </>
  );
}

/**
 * The next 7 days hour by hour: a table with a row per UTC hour of the day
 * and a column per UTC day (both headers), each cell the GPUs free of the
 * machine's and, for the host, which GPUs are booked; hours outside the
 * window (gone, or past its end) show a dash. Colour only repeats the text.
 */
function CalendarTable({ machine: m, calendar: c }: { machine: MachineFieldsFragment; calendar: Calendar }) {
  const free = new Map<number, number>();
  for (const h of c.hours) free.set(Date.parse(h.startsAt), h.freeGpus);
  const from = Date.parse(c.from);
  const to = Date.parse(c.to);
  const days: number[] = [];
  for (let d = Math.floor(from / DAY_MS) * DAY_MS; d < to; d += DAY_MS) days.push(d);
  const booked = (start: number) =>
    c.bookings
      .filter((b) => Date.parse(b.startsAt) <= start && start < Date.parse(b.endsAt))
      .map((b) => b.gpuIndex)
      .sort((a, b) => a - b);
  const captionId = `calendar-${m.id}-caption`;
  return (
    <>
      <h5 className="label">Next {CALENDAR_DAYS} days</h5>
      <div className="scroll" tabIndex={0} role="region" aria-labelledby={captionId}>
        <table className="lines calendar" data-testid="reservation-calendar">
          <caption id={captionId}>
            Free GPUs of {c.gpuCount} per hour on {m.name}, {utcRange(c.from, c.to)}
          </caption>
          <thead>
            <tr>
              <th scope="col">Hour (UTC)</th>
              {days.map((d) => (
                <th scope="col" key={d}>
                  {new Date(d).toISOString().slice(0, 10)}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {Array.from({ length: 24 }, (_, hour) => (
              <tr key={hour}>
                <th scope="row">{`${String(hour).padStart(2, '0')}:00`}</th>
                {days.map((d) => {
                  const start = d + hour * HOUR_MS;
                  const n = free.get(start);
                  if (n === undefined) {
                    return (
                      <td key={d} className="cal-none">
                        –
                      </td>
                    );
                  }
                  const gpus = booked(start);
                  return (
                    <td
                      key={d}
                      className={n === 0 ? 'cal-full' : n < c.gpuCount ? 'cal-some' : 'cal-free'}
                      data-starts-at={new Date(start).toISOString()}
                      data-free={n}
                    >
                      {n}/{c.gpuCount}
                      {gpus.length > 0 && <small className="cal-booked">GPU {gpus.join(', ')} booked</small>}
                    </td>
                  );
                })}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function BlockList({
  machine: m,
  reservations,
  penaltyRate,
  onChanged,
}: {
  machine: MachineFieldsFragment;
  reservations: HostReservationFieldsFragment[];
  penaltyRate: string;
  onChanged: () => void;
}) {
  return (
    <>
      <h5 className="label">Blocks booked on {m.name}</h5>
      {reservations.length === 0 ? (
        <p className="empty">No blocks booked.</p>
      ) : (
        <div className="scroll" tabIndex={0} role="region" aria-label={`Blocks booked on ${m.name}`}>
          <table className="lines">
            <thead>
              <tr>
                <th scope="col">Reservation</th>
                <th scope="col">GPUs</th>
                <th scope="col">Block</th>
                <th scope="col">Hours left</th>
                <th scope="col">Amount</th>
                <th scope="col">Released to you</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {reservations.map((r) => (
                <BlockRow key={r.id} reservation={r} penaltyRate={penaltyRate} onChanged={onChanged} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function BlockRow({
  reservation: r,
  penaltyRate,
  onChanged,
}: {
  reservation: HostReservationFieldsFragment;
  penaltyRate: string;
  onChanged: () => void;
}) {
  const [confirming, setConfirming] = useState(false);
  const [reason, setReason] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const reasonInput = useRef<HTMLInputElement>(null);
  useEffect(() => {
    if (confirming) reasonInput.current?.focus();
  }, [confirming]);
  const reasonId = `cancel-reason-${r.id}`;

  const cancel = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await request(CancelReservation, { id: r.id, reason });
      setConfirming(false);
      onChanged();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  // The penalty on what would go back now: the escrow not yet released.
  const remaining = r.escrow ? parseDecimal(r.escrow.remaining) : null;
  const penalty = remaining === null ? null : (remaining * parseDecimal(penaltyRate)) / 10n ** 12n;
  return (
    <tr data-reservation-id={r.id} data-state={r.state}>
      <th scope="row">
        <code title={r.id}>{shortId(r.id)}</code>
        {r.parentId && <small> (resold hours)</small>}
      </th>
      <td>
        {r.gpuCount} · GPU {r.gpuIndices.join(', ')}
      </td>
      <td>{utcRange(r.startsAt, r.endsAt)}</td>
      <td>
        {r.hoursLeft} of {r.hours}
      </td>
      <td>{formatMoney(r.amount, r.currency)}</td>
      <td>{r.escrow ? formatMoney(r.escrow.released, r.currency) : '—'}</td>
      <td>
        <span className="badge">{stateText(r.state)}</span>
        {r.reason && (
          <>
            <br />
            <small>{r.reason}</small>
          </>
        )}
      </td>
      <td>
        {CANCELLABLE.has(r.state) &&
          (confirming ? (
            <form onSubmit={(e) => void cancel(e)} noValidate className="cancel-form">
              <Field id={reasonId} label={`Why cancel ${shortId(r.id)}?`} error={error} field="reason">
                <input
                  {...fieldProps(reasonId, error, 'reason')}
                  ref={reasonInput}
                  maxLength={500}
                  value={reason}
                  onChange={(e) => setReason(e.target.value)}
                />
              </Field>
              <p className="muted">
                The renter gets back what is not yet released, and you pay them {percent(Number(penaltyRate))} of it
                {penalty !== null && r.escrow ? ` (about ${formatMoney(penalty, r.currency)} now)` : ''}.
              </p>
              <button type="submit" className="danger" disabled={busy}>
                Yes, cancel block {shortId(r.id)}
              </button>{' '}
              <button type="button" disabled={busy} onClick={() => setConfirming(false)}>
                Keep it
              </button>
              <ErrorBox error={error} except={['reason']} />
            </form>
          ) : (
            <button type="button" className="danger-outline" onClick={() => setConfirming(true)}>
              Cancel block {shortId(r.id)}
            </button>
          ))}
      </td>
    </tr>
  );
}
