import { useState, type FormEvent } from 'react';
import { useDraft } from '../session';
import { request } from '../api';
import type { MachineFieldsFragment } from '../gql/graphql';
import { ListMachine, SetPrice, UnlistMachine } from '../operations';
import { ErrorBox, Field, fieldProps } from '../ui';
import { EarningsPreview } from './EarningsPreview';
import { MachineGpus } from './MachineGpus';
import { MachineReservations } from './MachineReservations';
import { MachineState, type HostProfile } from './MachineState';
import { money } from '../money';

interface Shared {
  /** The platform fee rate from the API, or null when it shows none. */
  feeRate: number | null;
  profile: HostProfile | null | undefined;
}

export function MachineList({
  machines,
  onChanged,
  ...shared
}: {
  machines: MachineFieldsFragment[] | null;
  onChanged: (machine: MachineFieldsFragment) => void;
} & Shared) {
  return (
    <section aria-labelledby="machines-title" className="card">
      <h2 id="machines-title">My machines</h2>
      {machines === null ? (
        <p>Loading…</p>
      ) : machines.length === 0 ? (
        <p>No machines yet: register one above.</p>
      ) : (
        <ul className="machines">
          {machines.map((m) => (
            <MachineRow key={m.id} machine={m} onChanged={onChanged} {...shared} />
          ))}
        </ul>
      )}
    </section>
  );
}

function MachineRow({
  machine: m,
  onChanged,
  feeRate,
  profile,
}: {
  machine: MachineFieldsFragment;
  onChanged: (machine: MachineFieldsFragment) => void;
} & Shared) {
  const [price, setPrice] = useDraft(`price.${m.id}`, m.pricePerGpuHour ?? '');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  // The details (and their heartbeat-gaps request) only while open.
  const [detailsOpen, setDetailsOpen] = useState(false);
  // Likewise the GPUs: the API reads each machine's GPUs apart.
  const [gpusOpen, setGpusOpen] = useState(false);
  // And its reservations (calendar, blocks, escrow): read when opened.
  const [reservationsOpen, setReservationsOpen] = useState(false);
  const priceId = `price-${m.id}`;

  const run = async (action: () => Promise<MachineFieldsFragment>) => {
    setBusy(true);
    setError(null);
    try {
      onChanged(await action());
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const savePrice = (event: FormEvent) => {
    event.preventDefault();
    void run(async () => (await request(SetPrice, { machineId: m.id, price: price.trim() })).setMachinePricing);
  };
  const toggle = () =>
    void run(async () =>
      m.listed
        ? (await request(UnlistMachine, { machineId: m.id })).unlistMachine
        : (await request(ListMachine, { machineId: m.id })).listMachine,
    );

  return (
    <li className="machine" aria-labelledby={`name-${m.id}`} data-machine-id={m.id}>
      <div className="machine-head">
        <h3 id={`name-${m.id}`}>{m.name}</h3>
        <span className={`badge ${m.online ? 'on' : 'off'}`}>{m.online ? 'Online' : 'Offline'}</span>
        <span className={`badge ${m.listed ? 'listed' : 'unlisted'}`}>{m.listed ? 'Listed' : 'Not listed'}</span>
      </div>
      <p className="specs">
        {m.gpuCount} × {m.gpuModel}, {m.vramGib} GiB each · {m.country} ·{' '}
        {m.pricePerGpuHour ? (
          <span title={money(m.pricePerGpuHour, m.currency, 4)}>{`${m.pricePerGpuHour} ${m.currency} per GPU-hour`}</span>
        ) : (
          'no price yet'
        )}
        {m.lastHeartbeatAtUtc ? ` · last heartbeat ${new Date(m.lastHeartbeatAtUtc).toLocaleString()}` : ' · agent never connected'}
      </p>
      <form onSubmit={savePrice} className="row" noValidate>
        <Field id={priceId} label={`Price per GPU-hour (${m.currency})`} error={error} field="pricePerGpuHour">
          <input
            {...fieldProps(priceId, error, 'pricePerGpuHour')}
            inputMode="decimal"
            placeholder="0.35"
            value={price}
            onChange={(e) => setPrice(e.target.value)}
          />
        </Field>
        <button type="submit" disabled={busy}>
          Save price
        </button>
        <button
          type="button"
          className="primary"
          disabled={busy || (!m.listed && !m.pricePerGpuHour)}
          title={!m.listed && !m.pricePerGpuHour ? 'Set a price first' : undefined}
          onClick={toggle}
        >
          {m.listed ? `Unlist ${m.name}` : `List ${m.name}`}
        </button>
      </form>
      <ErrorBox error={error} except={['pricePerGpuHour']} />
      <EarningsPreview price={price} currency={m.currency} gpus={m.gpuCount} feeRate={feeRate} />
      <details className="more" onToggle={(e) => setDetailsOpen(e.currentTarget.open)}>
        <summary>Live state and verification</summary>
        {detailsOpen && <MachineState machine={m} profile={profile} />}
      </details>
      <details className="more" onToggle={(e) => setGpusOpen(e.currentTarget.open)}>
        <summary>GPUs</summary>
        {gpusOpen && <MachineGpus machine={m} />}
      </details>
      <details className="more" onToggle={(e) => setReservationsOpen(e.currentTarget.open)}>
        <summary>Reservations</summary>
        {reservationsOpen && <MachineReservations machine={m} />}
      </details>
    </li>
  );
}
