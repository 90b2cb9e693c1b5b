import { useCallback, useEffect, useState, type FormEvent } from 'react';
import { request } from '../api';
import type { GpuMode, HostMachineGpusQuery, MachineFieldsFragment, MachineGpuFieldsFragment } from '../gql/graphql';
import { HostMachineGpus, SetGpuMode } from '../operations';
import { ErrorBox, Field, fieldProps } from '../ui';

type MigProfile = HostMachineGpusQuery['gpuModels'][number]['migProfiles'][number];

/** A MIG-capable GPU's memory slices (NVIDIA's MIG user guide). */
const MEMORY_SLICES = 8;

/** The modes a host switches between here; a fixed layout is set through the API. */
const SETTABLE: { mode: GpuMode; label: string }[] = [
  { mode: 'WHOLE', label: 'Whole GPU' },
  { mode: 'MIG_AUTO', label: 'MIG, automatic placement' },
];

function modeText(mode: GpuMode): string {
  switch (mode) {
    case 'WHOLE':
      return 'Whole GPU';
    case 'MIG_AUTO':
      return 'MIG, automatic placement';
    case 'MIG_FIXED':
      return 'MIG, fixed layout';
  }
}

/** The start of an id, enough to tell a host's instances apart at a glance. */
function shortId(id: string): string {
  return id.slice(0, 8);
}

function sliceRange(start: number, size: number): string {
  return size === 1 ? `memory slice ${start}` : `memory slices ${start}–${start + size - 1}`;
}

/**
 * A machine's GPUs as the API has them (`Machine.gpus`): each GPU's index and
 * mode; for a MIG GPU a bar of its 8 memory slices with the slices rented
 * (profile, and which instance) and, for a fixed layout, its slots; and a
 * form to run a GPU whole or as MIG slices placed automatically
 * (`setGpuMode`). Loaded when shown, again after a change or on "Refresh".
 */
export function MachineGpus({ machine: m }: { machine: MachineFieldsFragment }) {
  const [gpus, setGpus] = useState<MachineGpuFieldsFragment[] | null>(null);
  const [profiles, setProfiles] = useState<MigProfile[] | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [loading, setLoading] = useState(false);

  const load = useCallback(async () => {
    setLoading(true);
    try {
      const d = await request(HostMachineGpus);
      const mine = d.myMachines.find((x) => x.id === m.id);
      setGpus(mine ? mine.gpus : []);
      setProfiles(d.gpuModels.find((x) => x.name === m.gpuModel)?.migProfiles ?? []);
      setLoadError(null);
    } catch (e) {
      setLoadError(e);
    } finally {
      setLoading(false);
    }
  }, [m.id, m.gpuModel]);

  useEffect(() => {
    void load();
  }, [load]);

  const titleId = `gpus-${m.id}-title`;
  return (
    <section className="gpus" aria-labelledby={titleId} data-testid="machine-gpus">
      <h4 id={titleId} className="visually-hidden">
        GPUs of {m.name}
      </h4>
      <ErrorBox error={loadError} />
      {gpus === null || profiles === null ? (
        !loadError && <p className="muted">Loading…</p>
      ) : (
        <>
          {profiles.length > 0 ? (
            <p className="muted">
              MIG profiles of the {m.gpuModel}: {profiles.map((p) => p.name).join(', ')}.
            </p>
          ) : (
            <p className="muted">The {m.gpuModel} has no MIG: its GPUs are rented whole.</p>
          )}
          {gpus.length === 0 ? (
            <p className="muted">The API reports no GPUs for this machine yet.</p>
          ) : (
            <ul className="gpu-list">
              {gpus.map((g) => (
                <GpuItem key={g.index} machineId={m.id} gpu={g} profiles={profiles} />
              ))}
            </ul>
          )}
          {profiles.length > 0 && gpus.length > 0 && (
            <ModeForm machine={m} gpus={gpus} onChanged={setGpus} />
          )}
        </>
      )}
      <button type="button" className="link" onClick={() => void load()} disabled={loading}>
        Refresh GPUs
      </button>
    </section>
  );
}

function GpuItem({
  machineId,
  gpu: g,
  profiles,
}: {
  machineId: string;
  gpu: MachineGpuFieldsFragment;
  profiles: MigProfile[];
}) {
  const headId = `gpu-${machineId}-${g.index}`;
  const used = g.slices.reduce((n, s) => n + s.size, 0);
  return (
    <li className="gpu" aria-labelledby={headId} data-gpu-index={g.index} data-mode={g.mode}>
      <p className="gpu-head" id={headId}>
        <strong>GPU {g.index}</strong> · {modeText(g.mode)} ·{' '}
        {g.mode === 'WHOLE'
          ? g.rentedWhole
            ? 'rented whole'
            : 'free'
          : `${used} of ${MEMORY_SLICES} memory slices in use`}
      </p>
      {g.mode !== 'WHOLE' && <SliceBar gpu={g} />}
      {g.mode === 'MIG_FIXED' && <LayoutBar gpu={g} profiles={profiles} />}
    </li>
  );
}

/**
 * The GPU's 8 memory slices left to right: each rented slice spans its
 * memory slices, every other memory slice is free. A list, so a screen
 * reader reads it in order with each part's range and holder.
 */
function SliceBar({ gpu: g }: { gpu: MachineGpuFieldsFragment }) {
  const parts: { start: number; size: number; slice: MachineGpuFieldsFragment['slices'][number] | null }[] = [];
  for (let i = 0; i < MEMORY_SLICES; ) {
    const slice = g.slices.find((s) => s.start === i && s.size > 0);
    if (slice) {
      // Never past the bar, should the API ever say otherwise.
      const size = Math.min(slice.size, MEMORY_SLICES - i);
      parts.push({ start: i, size, slice });
      i += size;
    } else {
      parts.push({ start: i, size: 1, slice: null });
      i += 1;
    }
  }
  return (
    <ol className="slice-bar" aria-label={`GPU ${g.index} memory slices`}>
      {parts.map(({ start, size, slice }) =>
        slice ? (
          <li
            key={start}
            className="slice held"
            style={{ gridColumn: `${start + 1} / span ${size}` }}
            data-profile={slice.profile}
            data-start={start}
            data-size={size}
            data-instance-id={slice.instanceId ?? ''}
          >
            <span className="visually-hidden">{sliceRange(start, size)}: </span>
            <span className="slice-profile">{slice.profile}</span>{' '}
            <span className="slice-who">
              {slice.instanceId ? (
                <>
                  rented by instance <span title={slice.instanceId}>{shortId(slice.instanceId)}</span>
                  <span className="visually-hidden"> ({slice.instanceId})</span>
                </>
              ) : (
                'held'
              )}
            </span>
          </li>
        ) : (
          <li key={start} className="slice free" style={{ gridColumn: `${start + 1} / span 1` }} data-start={start}>
            <span className="visually-hidden">{sliceRange(start, 1)}: </span>free
          </li>
        ),
      )}
    </ol>
  );
}

/** A fixed layout's slots under the bar, each spanning its profile's memory slices. */
function LayoutBar({ gpu: g, profiles }: { gpu: MachineGpuFieldsFragment; profiles: MigProfile[] }) {
  const slots = [...g.layout].sort((a, b) => a.start - b.start);
  // A profile the model does not list (it should not happen) spans one slice.
  const span = (profile: string, start: number) =>
    Math.max(1, Math.min(profiles.find((p) => p.name === profile)?.memorySlices ?? 1, MEMORY_SLICES - start));
  return (
    <>
      {/* The list's own name says this to a screen reader. */}
      <p className="slice-caption muted" aria-hidden="true">
        Fixed layout: slices go only into these slots
      </p>
      <ol className="slice-bar layout" aria-label={`GPU ${g.index} fixed layout`}>
        {slots.map((slot) => {
          const size = span(slot.profile, slot.start);
          return (
            <li
              key={`${slot.profile}@${slot.start}`}
              className="slice slot"
              style={{ gridColumn: `${slot.start + 1} / span ${size}` }}
              data-profile={slot.profile}
              data-start={slot.start}
            >
              <span className="visually-hidden">Layout slot, {sliceRange(slot.start, size)}: </span>
              {slot.profile}
            </li>
          );
        })}
      </ol>
    </>
  );
}

function ModeForm({
  machine: m,
  gpus,
  onChanged,
}: {
  machine: MachineFieldsFragment;
  gpus: MachineGpuFieldsFragment[];
  onChanged: (gpus: MachineGpuFieldsFragment[]) => void;
}) {
  const defaultMode = (index: number): GpuMode =>
    gpus.find((g) => g.index === index)?.mode === 'MIG_AUTO' ? 'MIG_AUTO' : 'WHOLE';
  const [index, setIndex] = useState(gpus[0]?.index ?? 0);
  const [mode, setMode] = useState<GpuMode>(() => defaultMode(gpus[0]?.index ?? 0));
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState<string | null>(null);
  const gpuId = `gpu-index-${m.id}`;
  const modeId = `gpu-mode-${m.id}`;

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    setDone(null);
    try {
      const d = await request(SetGpuMode, { input: { machineId: m.id, gpuIndex: index, mode } });
      onChanged(d.setGpuMode);
      setDone(`GPU ${index} now runs as: ${modeText(mode)}.`);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <form className="row" onSubmit={(e) => void submit(e)} noValidate aria-label={`GPU mode of ${m.name}`}>
        <Field id={gpuId} label="GPU" error={error} field="gpuIndex">
          <select
            {...fieldProps(gpuId, error, 'gpuIndex')}
            value={index}
            onChange={(e) => {
              const next = Number(e.target.value);
              setIndex(next);
              setMode(defaultMode(next));
            }}
          >
            {gpus.map((g) => (
              <option key={g.index} value={g.index}>
                GPU {g.index}
              </option>
            ))}
          </select>
        </Field>
        <Field id={modeId} label="Mode" error={error} field="mode">
          <select {...fieldProps(modeId, error, 'mode')} value={mode} onChange={(e) => setMode(e.target.value as GpuMode)}>
            {SETTABLE.map((s) => (
              <option key={s.mode} value={s.mode}>
                {s.label}
              </option>
            ))}
          </select>
        </Field>
        <button type="submit" disabled={busy}>
          Set GPU mode
        </button>
      </form>
      <ErrorBox error={error} except={['gpuIndex', 'mode']} />
      <p role="status" className="muted">
        {done ?? ''}
      </p>
    </>
  );
}
