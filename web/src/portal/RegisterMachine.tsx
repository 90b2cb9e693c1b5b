import { useEffect, useState, type FormEvent } from 'react';
import { request } from '../api';
import type { GpuCatalogQuery, MachineFieldsFragment } from '../gql/graphql';
import { GpuCatalog, RegisterMachine as RegisterMachineMutation } from '../operations';
import { useDraft } from '../session';
import { ErrorBox, Field, fieldProps, newKey } from '../ui';

type Model = GpuCatalogQuery['gpuModels'][number];

const FIELDS = ['name', 'gpuModel', 'gpuCount', 'vramGib', 'cpuCores', 'ramGib', 'diskGib', 'country'];

export function RegisterMachine({
  onRegistered,
}: {
  onRegistered: (machine: MachineFieldsFragment, agentToken: string | null | undefined) => void;
}) {
  const [models, setModels] = useState<Model[] | null>(null);
  const [catalogError, setCatalogError] = useState<unknown>(null);
  const [name, setName] = useDraft('register.name', '');
  const [gpuModel, setGpuModel] = useDraft('register.gpuModel', '');
  const [gpuCount, setGpuCount] = useDraft('register.gpuCount', '1');
  const [vramGib, setVramGib] = useDraft('register.vramGib', '');
  const [cpuCores, setCpuCores] = useDraft('register.cpuCores', '16');
  const [ramGib, setRamGib] = useDraft('register.ramGib', '64');
  const [diskGib, setDiskGib] = useDraft('register.diskGib', '1000');
  const [country, setCountry] = useDraft('register.country', '');
  // One key per machine being registered: a retry after a lost answer
  // returns the same machine rather than a second one.
  const [idempotencyKey, setIdempotencyKey] = useState(newKey);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    request(GpuCatalog)
      .then((data) => setModels(data.gpuModels))
      .catch(setCatalogError);
  }, []);

  const chooseModel = (value: string) => {
    setGpuModel(value);
    const model = models?.find((m) => m.name === value);
    if (model) setVramGib(String(model.vramGib));
  };

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const data = await request(RegisterMachineMutation, {
        input: {
          name: name.trim(),
          gpuModel,
          gpuCount: Number(gpuCount),
          vramGib: vramGib === '' ? null : Number(vramGib),
          cpuCores: Number(cpuCores),
          ramGib: Number(ramGib),
          diskGib: Number(diskGib),
          country: country.trim().toUpperCase(),
          idempotencyKey,
        },
      });
      onRegistered(data.registerMachine.machine, data.registerMachine.agentToken);
      setName('');
      setIdempotencyKey(newKey());
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const num = (id: string, label: string, field: string, value: string, set: (v: string) => void, min = 1) => (
    <Field id={id} label={label} error={error} field={field}>
      <input
        {...fieldProps(id, error, field)}
        type="number"
        inputMode="numeric"
        min={min}
        required
        value={value}
        onChange={(e) => set(e.target.value)}
      />
    </Field>
  );

  return (
    <section aria-labelledby="register-title" className="card">
      <h2 id="register-title">Register a machine</h2>
      <form onSubmit={submit} noValidate className="grid">
        <Field id="m-name" label="Machine name" error={error} field="name">
          <input
            {...fieldProps('m-name', error, 'name')}
            required
            value={name}
            onChange={(e) => setName(e.target.value)}
          />
        </Field>
        <Field id="m-model" label="GPU model" error={error} field="gpuModel">
          <select
            {...fieldProps('m-model', error, 'gpuModel')}
            required
            value={gpuModel}
            disabled={models === null}
            onChange={(e) => chooseModel(e.target.value)}
          >
            <option value="">{models === null ? 'Loading the GPU catalog…' : 'Choose a model'}</option>
            {models?.map((m) => (
              <option key={m.name} value={m.name}>
                {m.name} ({m.vramGib} GiB, {m.architecture})
              </option>
            ))}
          </select>
        </Field>
        {num('m-count', 'GPUs', 'gpuCount', gpuCount, setGpuCount)}
        <Field id="m-vram" label="VRAM per GPU (GiB)" error={error} field="vramGib" hint="Filled in from the model.">
          <input
            {...fieldProps('m-vram', error, 'vramGib', true)}
            type="number"
            inputMode="numeric"
            min={1}
            value={vramGib}
            onChange={(e) => setVramGib(e.target.value)}
          />
        </Field>
        {num('m-cpu', 'CPU cores', 'cpuCores', cpuCores, setCpuCores)}
        {num('m-ram', 'RAM (GiB)', 'ramGib', ramGib, setRamGib)}
        {num('m-disk', 'Disk (GiB)', 'diskGib', diskGib, setDiskGib)}
        <Field id="m-country" label="Country" error={error} field="country" hint="Two letters, e.g. DE.">
          <input
            {...fieldProps('m-country', error, 'country', true)}
            required
            maxLength={2}
            autoComplete="country"
            value={country}
            onChange={(e) => setCountry(e.target.value)}
          />
        </Field>
        <div className="wide">
          <ErrorBox error={catalogError} />
          <ErrorBox error={error} except={FIELDS} />
          <button type="submit" className="primary" disabled={busy || models === null}>
            Register machine
          </button>
        </div>
      </form>
    </section>
  );
}
